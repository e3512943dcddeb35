"""vecdot on CuPy: one fused reduction kernel, no product temporary.

``cupy.ReductionKernel`` broadcasts the inputs, multiplies in the map step and sums
in registers, so each input is read once. Half precision is multiplied and summed in
float32; complex inputs conjugate the first argument.
"""

from __future__ import annotations

import threading
from typing import Any

import cupy

from ... import _dispatch
from ...vecdot import VecdotArgs

_lock = threading.Lock()
_kernels: dict[str, Any] = {}

# kind -> (map expression, post-map expression, reduce type or None for T)
_SPECS = {
    "real": ("x * y", "z = a", None),
    "half": ("float(x) * float(y)", "z = (T)a", "float"),
    "complex": ("conj(x) * y", "z = a", None),
}


def _kernel(kind: str) -> Any:
    try:
        return _kernels[kind]
    except KeyError:
        pass
    map_expr, post_map, reduce_type = _SPECS[kind]
    kernel = cupy.ReductionKernel(
        "T x, T y",
        "T z",
        map_expr,
        "a + b",
        post_map,
        "0",
        f"portops_vecdot_{kind}",
        reduce_type=reduce_type,
    )
    with _lock:
        _kernels.setdefault(kind, kernel)
    return _kernels[kind]


def _cupy(a: VecdotArgs) -> Any:
    """Fused multiply-and-sum ReductionKernel (float32 accumulation for float16)."""
    x1, x2 = a.x1, a.x2
    dtype = cupy.result_type(x1, x2)
    x1 = x1.astype(dtype, copy=False)
    x2 = x2.astype(dtype, copy=False)
    if dtype == cupy.float16:
        kind = "half"
    elif dtype.kind == "c":
        kind = "complex"
    else:
        kind = "real"
    ndim = max(x1.ndim, x2.ndim)
    return _kernel(kind)(x1, x2, axis=ndim + a.axis, keepdims=a.keepdims)


_dispatch.register("vecdot", "cupy", libraries=("cupy",), devices=("cuda",), priority=10)(_cupy)
