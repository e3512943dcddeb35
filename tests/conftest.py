"""The ``backend`` fixture: every test taking it runs once per array backend."""

from __future__ import annotations

import pytest
from backends import Backend, requested_backends, require


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        names, _ = requested_backends()
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    return require(request.param)
