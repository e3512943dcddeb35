"""Result and accumulation dtypes, shared by the operations' front ends."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["accumulation_dtype", "promote", "result_dtype"]


def promote(xp: Any, a: Any, b: Any) -> Any:
    """``xp.result_type(a, b)``; torch's by ``promote_types`` (array-api-compat's
    ``torch.result_type`` of empty tensors breaks ``torch.compile`` graphs)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.dtype) and isinstance(b, torch.dtype):
        return torch.promote_types(a, b)
    return xp.result_type(a, b)


def result_dtype(xp: Any, a: Any, b: Any = None) -> Any:
    """``xp.result_type`` of the dtypes of arrays `a` and `b` (`b` may be None)."""
    return a.dtype if b is None or a.dtype == b.dtype else promote(xp, a.dtype, b.dtype)


def accumulation_dtype(xp: Any, dtype: Any) -> Any:
    """float32 for half-precision real floats (float16, bfloat16), else `dtype` itself."""
    if xp is np:  # NumPy's kernels, without isdtype's cost (float16 is its only half)
        return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)
    if isinstance(dtype, np.dtype) and dtype.kind != "V":  # NumPy, CuPy, Dask, JAX dtypes
        return _FLOAT32 if dtype.kind == "f" and dtype.itemsize < 4 else dtype
    # No cache keyed by dtype: torch.compile cannot compare torch and NumPy dtype keys.
    if xp.isdtype(dtype, "real floating") and xp.finfo(dtype).bits < 32:
        return xp.float32
    return dtype


_FLOAT32 = np.dtype(np.float32)
