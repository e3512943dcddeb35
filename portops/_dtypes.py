"""Result and accumulation dtypes, shared by the operations' front ends."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["accumulation_dtype", "result_dtype"]


def result_dtype(xp: Any, a: Any, b: Any = None) -> Any:
    """``xp.result_type`` of the dtypes of arrays `a` and `b` (`b` may be None)."""
    if b is None:
        return a.dtype
    if a.dtype == b.dtype:
        return a.dtype
    return xp.result_type(a.dtype, b.dtype)


def accumulation_dtype(xp: Any, dtype: Any) -> Any:
    """float32 for half-precision real floats (float16, bfloat16), else `dtype` itself."""
    if xp is np:  # NumPy's kernels, without isdtype's cost (float16 is its only half)
        return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)
    if isinstance(dtype, np.dtype) and dtype.kind != "V":  # NumPy, CuPy, Dask, JAX dtypes
        return _FLOAT32 if dtype.kind == "f" and dtype.itemsize < 4 else dtype
    key = (id(xp), dtype)
    try:
        return _accumulation[key]
    except (KeyError, TypeError):
        pass
    acc = dtype
    if xp.isdtype(dtype, "real floating") and xp.finfo(dtype).bits < 32:
        acc = xp.float32
    try:
        _accumulation[key] = acc  # isdtype and finfo cost microseconds on torch
    except TypeError:  # an unhashable dtype object
        pass
    return acc


_FLOAT32 = np.dtype(np.float32)
# (id of the namespace, dtype) -> accumulation dtype; namespaces are modules, never freed.
_accumulation: dict[tuple[int, Any], Any] = {}
