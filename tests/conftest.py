"""The ``backend`` fixture: every test taking it runs once per array backend."""

from __future__ import annotations

import os

# JAX takes 75% of a GPU's memory in every process that imports it, unless told not to;
# with pytest-xdist's workers the rest then run out.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import pytest
from backends import Backend, requested_backends, require


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    names, _ = requested_backends()
    impl_params = getattr(metafunc.module, "impl_params", None)
    if "impl" in metafunc.fixturenames and impl_params is not None:
        # A module's implementations differ by backend: only the pairs that exist run.
        pairs = [(name, impl) for name in names for impl in impl_params(name)]
        metafunc.parametrize(("backend", "impl"), pairs, indirect=["backend"])
    else:
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    return require(request.param)
