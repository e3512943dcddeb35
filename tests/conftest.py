"""The ``backend`` fixture: every test taking it runs once per array backend."""

from __future__ import annotations

import pytest
from backends import Backend, requested_backends


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        names, _ = requested_backends()
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    b = Backend(request.param)
    reason = b.unavailable_reason()
    if reason is not None:
        _, explicit = requested_backends()
        if explicit:
            pytest.fail(f"backend {b.name} was requested but is unavailable: {reason}")
        pytest.skip(f"backend {b.name} unavailable: {reason}")
    return b
