"""vecdot on CuPy: one fused reduction kernel, no product temporary (raw kernels
where rows merge, ``cupy.ReductionKernel`` otherwise).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import cupy
import numpy as np

from ... import extend
from ..._kernels.geometry import INT32_LIMIT, WARP
from ..._kernels.loader import CTYPES, kernel_name, real_of
from ..._ops.vecdot import VecdotArgs
from ..._tables import CUDA
from ...extend import Priority
from .shift_sum import _function, _on_device

# kind -> (map expression, post-map expression, reduce type or None for T)
_SPECS = {
    "real": ("x * y", "z = a", None),
    "half": ("float(x) * float(y)", "z = (T)a", "float"),
    "complex": ("conj(x) * y", "z = a", None),
}


@cache
def _kernel(kind: str) -> Any:
    map_expr, post_map, reduce_type = _SPECS[kind]
    return cupy.ReductionKernel(
        "T x, T y",
        "T z",
        map_expr,
        "a + b",
        post_map,
        "0",
        f"portops_vecdot_{kind}",
        reduce_type=reduce_type,
    )


def _cupy(a: VecdotArgs) -> Any:
    """Fused multiply-and-sum ReductionKernel (float32 accumulation for float16)."""
    dtype = a.dtype
    x1, x2 = (x.astype(dtype, copy=False) for x in (a.x1, a.x2))
    kind = "half" if dtype == cupy.float16 else "complex" if dtype.kind == "c" else "real"
    return _kernel(kind)(x1, x2, axis=max(x1.ndim, x2.ndim) + a.axis, keepdims=a.keepdims)


# ----------------------------------------------------------------------------- raw kernels

_RAW = frozenset(CTYPES) - {"complex64", "complex128"}


@cache
def _sms(device_id: int) -> int:
    return int(cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"])


def _rows_view(x1: Any, x2: Any, axis: int) -> tuple[list[int], int, int] | None:
    """Element strides of both inputs as (rows, length) views of one broadcast layout,
    rows and length; None when the batch dims do not merge or strides are not whole."""
    shape = cupy.broadcast_shapes(x1.shape, x2.shape)
    ax = len(shape) + axis
    length = shape[ax]
    rows = math.prod(shape) // length if length else 0
    strides = []
    for x in (x1, x2):
        v = cupy.moveaxis(cupy.broadcast_to(x, shape), ax, -1)
        dims = [(n, s) for n, s in zip(v.shape[:-1], v.strides[:-1], strict=True) if n != 1]
        if any(s0 != n1 * s1 for (_, s0), (n1, s1) in itertools.pairwise(dims)):
            return None
        strides += [dims[-1][1] if dims else 0, v.strides[-1]]
    if any(s % x1.itemsize for s in strides):
        return None
    return [s // x1.itemsize for s in strides], rows, length


def plan(a: VecdotArgs) -> Callable[[Any, Any], Any] | None:
    """A raw-kernel plan for this call's signature, or None (ReductionKernel runs)."""
    x1, x2, dtype = a.x1, a.x2, np.dtype(a.dtype)
    if x1.dtype != dtype or x2.dtype != dtype or dtype.name not in _RAW:
        return None
    view = _rows_view(x1, x2, a.axis)
    if view is None:
        return None
    strides, rows, length = view
    if rows == 0 or length == 0:
        return None
    reach = max(
        rows * (abs(strides[0]) + abs(strides[2])), length * (abs(strides[1]) + abs(strides[3]))
    )
    large = max(reach, rows, length) >= INT32_LIMIT
    kind = "vecdot_thread_rows" if length < WARP else "vecdot_block_rows"  # else lanes idle
    device_id = x1.device.id
    # Half precision accumulates in float (real_of), every other type in itself.
    fn = _function(
        kernel_name(kind, (dtype.name, real_of(dtype.name)), large), device_id, "vecdot.cu"
    )
    if kind == "vecdot_thread_rows":
        block_size = CUDA["threads_per_block"]
        grid, block = (math.ceil(rows / block_size),), (block_size,)
    else:
        # Few rows: the widest blocks, so enough loads are in flight to fill the GPU.
        threads = 1024 if rows < 2 * _sms(device_id) else CUDA["threads_per_block"]
        grid, block = (rows,), (min(threads, WARP * math.ceil(length / WARP)),)
    scalars = tuple((np.int64 if large else np.int32)(v) for v in (rows, length, *strides))
    out_shape = tuple(a.shape)

    def run(x1: Any, x2: Any) -> Any:
        out = cupy.empty(out_shape, dtype=dtype)
        fn(grid, block, (x1, x2, out, *scalars))
        return out

    return _on_device(device_id, run)


def _raw_or_reduction(a: VecdotArgs) -> Any:
    """Raw row kernels for real and integer inputs, else a fused ReductionKernel."""
    run = plan(a)
    return _cupy(a) if run is None else run(a.x1, a.x2)


extend.register(
    "vecdot",
    "cupy",
    libraries=("cupy",),
    devices=("cuda",),
    priority=Priority.SPECIALIZED,
    planner=plan,
)(_raw_or_reduction)
