"""Test backends: how to make arrays of each library and check results against NumPy.

``PORTOPS_TEST_BACKENDS`` (comma-separated names, or ``all-cpu``) chooses the backends;
a backend named there that cannot be used fails the tests instead of skipping. When the
variable is unset, every backend whose library is installed runs and the others skip.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

ALL_CPU = ("numpy", "numpy_readonly", "array_api_strict", "torch", "jax", "dask")
GPU = ("cupy", "torch_cuda")
ENV = "PORTOPS_TEST_BACKENDS"


@dataclass(frozen=True)
class Backend:
    """One array type under test."""

    name: str

    @property
    def library(self) -> str:
        """The library name portops dispatches on."""
        return {"numpy_readonly": "numpy", "torch_cuda": "torch"}.get(self.name, self.name)

    @property
    def device(self) -> str:
        return "cuda" if self.name in GPU else "cpu"

    @property
    def module(self) -> str:
        return {"numpy_readonly": "numpy", "torch_cuda": "torch"}.get(self.name, self.name)

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec(self.module) is None:
            return f"{self.module} is not installed"
        if self.name == "torch_cuda":
            import torch

            if not torch.cuda.is_available():
                return "torch has no CUDA device"
        if self.name == "cupy":
            try:
                import cupy

                cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:
                return f"cupy has no CUDA device ({exc})"
        return None

    @property
    def xp(self) -> Any:
        """The namespace user code would write against."""
        import array_api_compat

        return array_api_compat.array_namespace(self.asarray(np.zeros(1)))

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """Make an array of this backend from a NumPy array (same values and dtype)."""
        a = np.asarray(a)
        if dtype is not None:
            a = a.astype(dtype)
        if self.name == "numpy":
            return a.copy()
        if self.name == "numpy_readonly":
            a = a.copy()
            a.flags.writeable = False  # catches mutation of inputs
            return a
        if self.name == "array_api_strict":
            import array_api_strict

            return array_api_strict.asarray(a.copy())
        if self.name in ("torch", "torch_cuda"):
            import torch

            t = torch.from_numpy(a.copy())
            return t.cuda() if self.name == "torch_cuda" else t
        if self.name == "jax":
            import jax

            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp

            return jnp.asarray(a)
        if self.name == "dask":
            import dask.array as da

            return da.from_array(a.copy(), chunks=tuple(max(1, (n + 1) // 2) for n in a.shape))
        if self.name == "cupy":
            import cupy

            return cupy.asarray(a)
        raise ValueError(self.name)

    def to_numpy(self, a: Any) -> np.ndarray:
        """Values of a result as a NumPy array (computing lazy arrays)."""
        if self.name == "array_api_strict":
            import array_api_strict

            return np.asarray(array_api_strict.asarray(a, copy=True)._array)
        if self.name in ("torch", "torch_cuda"):
            return a.detach().cpu().resolve_conj().numpy()
        if self.name == "dask":
            return np.asarray(a.compute())
        if self.name == "cupy":
            return a.get()
        return np.asarray(a)

    def check_type(self, a: Any) -> None:
        """Assert that `a` is an array of this backend on the expected device."""
        import array_api_compat as compat

        checks = {
            "numpy": compat.is_numpy_array,
            "torch": compat.is_torch_array,
            "jax": compat.is_jax_array,
            "dask": compat.is_dask_array,
            "cupy": compat.is_cupy_array,
            "array_api_strict": lambda a: type(a).__module__.startswith("array_api_strict"),
        }
        assert checks[self.library](a), f"expected a {self.library} array, got {type(a)}"
        if self.name == "torch_cuda":
            assert a.device.type == "cuda", a.device
        elif self.library == "torch":
            assert a.device.type == "cpu", a.device


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
            if item not in ALL_CPU + GPU:
                raise ValueError(f"{ENV}: unknown backend {item!r}; known: {ALL_CPU + GPU}")
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
            **tolerance(want_dtype),
        )
