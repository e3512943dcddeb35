"""Test backends: how to make arrays of each library and check results against NumPy.

Each backend is one entry of :data:`SPECS`. ``PORTOPS_TEST_BACKENDS`` (comma-separated
names, or ``all-cpu`` / ``all-gpu``) chooses the backends;
a backend named there that cannot be used fails the tests instead of skipping. When the
variable is unset, every backend whose library is installed runs and the others skip.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import array_api_compat as compat
import numpy as np

ENV = "PORTOPS_TEST_BACKENDS"


@dataclass(frozen=True)
class Spec:
    """How the tests use one array type: a new backend is one entry of :data:`SPECS`.

    ``make`` receives a NumPy array the tests own (a copy) and returns the backend's
    array of the same values and dtype; ``to_numpy`` reads a result back (computing
    lazy arrays); ``is_array`` says whether a result is of this type; ``probe`` returns
    why the backend cannot run on this machine beyond its module being missing (no
    CUDA device), or None; ``tolerance_scale`` widens the dtype's tolerances.
    """

    library: str  # the library portops dispatches on
    module: str  # the module that must be installed
    make: Callable[[np.ndarray], Any]
    is_array: Callable[[Any], bool]
    to_numpy: Callable[[Any], np.ndarray] = np.asarray
    device: str = "cpu"
    probe: Callable[[], str | None] = field(default=lambda: None)
    tolerance_scale: float = 1.0


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # catches mutation of inputs
    return a


def _array_api_strict(a: np.ndarray) -> Any:
    import array_api_strict

    return array_api_strict.asarray(a)


def _array_api_strict_to_numpy(a: Any) -> np.ndarray:
    import array_api_strict

    return np.asarray(array_api_strict.asarray(a, copy=True)._array)


def _torch(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(a)


def _torch_cuda(a: np.ndarray) -> Any:
    return _torch(a).cuda()


def _torch_to_numpy(a: Any) -> np.ndarray:
    return a.detach().cpu().resolve_conj().numpy()


def _torch_cuda_probe() -> str | None:
    import torch

    return None if torch.cuda.is_available() else "torch has no CUDA device"


def _jax(a: np.ndarray) -> Any:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return jnp.asarray(a)


def _dask(a: np.ndarray) -> Any:
    import dask.array as da

    return da.from_array(a, chunks=tuple(max(1, (n + 1) // 2) for n in a.shape))


def _cupy(a: np.ndarray) -> Any:
    import cupy

    return cupy.asarray(a)


def _cupy_probe() -> str | None:
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"cupy has no CUDA device ({exc})"
    return None


def _torch_on(device: str) -> Callable[[Any], bool]:
    return lambda a: compat.is_torch_array(a) and a.device.type == device


SPECS: dict[str, Spec] = {
    "numpy": Spec("numpy", "numpy", make=lambda a: a, is_array=compat.is_numpy_array),
    "numpy_readonly": Spec("numpy", "numpy", make=_readonly, is_array=compat.is_numpy_array),
    "array_api_strict": Spec(
        "array_api_strict",
        "array_api_strict",
        make=_array_api_strict,
        is_array=lambda a: type(a).__module__.startswith("array_api_strict"),
        to_numpy=_array_api_strict_to_numpy,
    ),
    "torch": Spec(
        "torch", "torch", make=_torch, is_array=_torch_on("cpu"), to_numpy=_torch_to_numpy
    ),
    "jax": Spec("jax", "jax", make=_jax, is_array=compat.is_jax_array),
    "dask": Spec(
        "dask",
        "dask",
        make=_dask,
        is_array=compat.is_dask_array,
        to_numpy=lambda a: np.asarray(a.compute()),
    ),
    "cupy": Spec(
        "cupy",
        "cupy",
        make=_cupy,
        is_array=compat.is_cupy_array,
        to_numpy=lambda a: a.get(),
        device="cuda",
        probe=_cupy_probe,
    ),
    "torch_cuda": Spec(
        "torch",
        "torch",
        make=_torch_cuda,
        is_array=_torch_on("cuda"),
        to_numpy=_torch_to_numpy,
        device="cuda",
        probe=_torch_cuda_probe,
    ),
}
ALL_CPU = tuple(name for name, spec in SPECS.items() if spec.device == "cpu")
GPU = tuple(name for name, spec in SPECS.items() if spec.device != "cpu")


@dataclass(frozen=True)
class Backend:
    """One array type under test (see :data:`SPECS`)."""

    name: str

    @property
    def spec(self) -> Spec:
        return SPECS[self.name]

    @property
    def library(self) -> str:
        """The library name portops dispatches on."""
        return self.spec.library

    @property
    def device(self) -> str:
        return self.spec.device

    @property
    def module(self) -> str:
        return self.spec.module

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec(self.module) is None:
            return f"{self.module} is not installed"
        return self.spec.probe()

    @property
    def xp(self) -> Any:
        """The namespace user code would write against."""
        return compat.array_namespace(self.asarray(np.zeros(1)))

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """Make an array of this backend from a NumPy array (same values and dtype)."""
        a = np.asarray(a)
        if dtype is not None:
            a = a.astype(dtype)
        return self.spec.make(a.copy())

    def to_numpy(self, a: Any) -> np.ndarray:
        """Values of a result as a NumPy array (computing lazy arrays)."""
        return self.spec.to_numpy(a)

    def check_type(self, a: Any) -> None:
        """Assert that `a` is an array of this backend on the expected device."""
        assert self.spec.is_array(a), (
            f"expected a {self.library} array on {self.device}, got {type(a)} "
            f"on {getattr(a, 'device', '?')}"
        )

    def tolerance(self, dtype: Any) -> dict[str, float]:
        """rtol/atol for results of `dtype` on this backend."""
        scale = self.spec.tolerance_scale
        return {k: v * scale for k, v in tolerance(dtype).items()}


def requested_backends() -> tuple[list[str], bool]:
    """Backend names to run, and whether they were requested explicitly."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return list(ALL_CPU + GPU), False
    names: list[str] = []
    for item in raw.split(","):
        item = item.strip()
        if item == "all-cpu":
            names.extend(ALL_CPU)
        elif item == "all-gpu":
            names.extend(GPU)
        elif item:
            if item not in SPECS:
                raise ValueError(f"{ENV}: unknown backend {item!r}; known: {', '.join(SPECS)}")
            names.append(item)
    return list(dict.fromkeys(names)), True


def require(name: str) -> Backend:
    """The backend `name`; skips when unavailable, fails when it was requested explicitly."""
    import pytest

    backend = Backend(name)
    reason = backend.unavailable_reason()
    if reason is not None:
        names, explicit = requested_backends()
        if explicit and name in names:
            pytest.fail(f"backend {name} was requested but is unavailable: {reason}")
        pytest.skip(f"backend {name} unavailable: {reason}")
    return backend


def tolerance(dtype: Any) -> dict[str, float]:
    """rtol/atol by dtype (results are compared in float64)."""
    name = np.dtype(dtype).name if not hasattr(dtype, "is_floating_point") else str(dtype)
    if "16" in name and "int" not in name:
        return {"rtol": 2e-2, "atol": 2e-2}
    if "float32" in name or "complex64" in name:
        return {"rtol": 2e-5, "atol": 2e-5}
    return {"rtol": 1e-11, "atol": 1e-11}


def assert_matches(backend: Backend, actual: Any, expected: np.ndarray, dtype: Any = None) -> None:
    """Check library, device, shape, dtype and values of `actual` against `expected`."""
    backend.check_type(actual)
    got = backend.to_numpy(actual)
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    want_dtype = np.dtype(dtype if dtype is not None else expected.dtype)
    assert got.dtype == want_dtype, f"dtype {got.dtype} != {want_dtype}"
    if np.issubdtype(want_dtype, np.integer) or want_dtype == np.bool_:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(
            got.astype(np.complex128 if np.iscomplexobj(got) else np.float64),
            expected,
            **backend.tolerance(want_dtype),
        )


def pythonpath(*first: str) -> str:
    """A subprocess's ``PYTHONPATH``: `first`, then this process's own (where its
    packages may come from)."""
    return os.pathsep.join(filter(None, [*first, os.environ.get("PYTHONPATH")]))


def assert_compiled_matches_eager(
    loss: Callable[[Any, Any], Any], backend_name: str, device: str = "cpu"
) -> None:
    """``torch.compile(loss, fullgraph=True)`` gives eager's value and gradient on a
    (2, 3, 4, 5) input with a (4, 5) mask."""
    import torch

    torch._dynamo.reset()  # a fresh compile: no automatic dynamic from an earlier case
    compiled = torch.compile(loss, fullgraph=True, backend=backend_name)
    x = torch.randn(2, 3, 4, 5, device=device, requires_grad=True)
    mask = torch.rand(4, 5, device=device) + 0.5
    value = compiled(x, mask)
    value.backward()
    x2 = x.detach().clone().requires_grad_()
    expected = loss(x2, mask)
    expected.backward()
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(x.grad, x2.grad)


def strategies(op: str, library: str, device: str) -> dict[str, list[str]]:
    """The strategies of every implementation of `op` that a call on `library`'s arrays
    on `device` could take, by implementation name (``implementations`` lists them)."""
    import portops

    found = {}
    for row in portops.implementations(op):
        if row.libraries is not None and library not in row.libraries:
            continue
        if row.devices is not None and device not in row.devices:
            continue
        found[row.name] = list(row.strategies)
    return found


def forced(op: str, name: str) -> Any:
    """``portops.prefer(op=name)``, skipping the test where `name` (an implementation or
    ``"implementation/strategy"``) does not apply to the call it wraps: a strategy that
    cannot compute a case (one that needs a single vector, say) is refused, never run."""
    import contextlib

    import portops

    @contextlib.contextmanager
    def context() -> Any:
        import pytest

        with portops.prefer(**{op: name}):
            try:
                yield
            except ValueError as exc:
                if "does not apply" not in str(exc):
                    raise
                pytest.skip(f"{name}: {exc}")

    return context()
