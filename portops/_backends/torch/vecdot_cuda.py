"""vecdot on CUDA tensors: a fused Triton row reduction, or torch's own product and sum.

Real floating inputs whose batch dimensions (after broadcasting) merge into rows are
reduced by :mod:`portops._backends.torch._triton_vecdot`: each input read once, no
product temporary, one launch (two when too few rows need the contracted axis split),
planned once per call signature so that a repeated call allocates and launches. Other
cases — complex and integer dtypes, layouts that do not merge, and calls that need a
gradient — use the product and sum, accumulated in float32 for half precision; unsigned
integers, which torch's CUDA kernels do not multiply, are computed in int64 (the same
result modulo the dtype's range).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from ... import extend
from ..._ops.vecdot import VecdotArgs
from ...extend import Priority
from .vecdot import _mul_sum

_UNSIGNED = {torch.uint16, torch.uint32, torch.uint64}

Run = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@cache
def _triton() -> Any:
    try:
        from . import _triton_vecdot
    except ImportError:
        return None
    return _triton_vecdot


@cache
def _sms(device: int) -> int:
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def _dtype(a: VecdotArgs) -> torch.dtype:
    d1, d2 = a.x1.dtype, a.x2.dtype
    return d1 if d1 is d2 else torch.promote_types(d1, d2)


def native(a: VecdotArgs) -> torch.Tensor:
    """Product and sum (float32 accumulation for half; int64 for unsigned); autograd."""
    dtype = _dtype(a)
    if dtype in _UNSIGNED:
        wide = _mul_sum(a.x1.to(torch.int64), a.x2.to(torch.int64), a.axis, a.keepdims,
                        torch.int64)  # fmt: skip
        return wide.view(torch.uint64) if dtype == torch.uint64 else wide.to(dtype)
    return _mul_sum(a.x1, a.x2, a.axis, a.keepdims, dtype)


def _rows_view(a: VecdotArgs) -> tuple[Any, Any, tuple[int, ...], int, int] | None:
    """Both inputs as (rows, length) views of one broadcast layout, or None."""
    x1, x2 = a.x1, a.x2
    shape = torch.broadcast_shapes(x1.shape, x2.shape)
    ndim = len(shape)
    axis = ndim + a.axis
    batch = [n for d, n in enumerate(shape) if d != axis]
    rows = 1
    for n in batch:
        rows *= n
    length = shape[axis]
    views = []
    for x in (x1, x2):
        v = x.reshape((1,) * (ndim - x.ndim) + tuple(x.shape)).expand(shape)
        v = v.movedim(axis, -1)
        try:
            v = v.view(rows, length)  # fails when the batch dims do not merge
        except RuntimeError:
            return None
        views.append(v)
    strides = (*views[0].stride(), *views[1].stride())
    return views[0], views[1], strides, rows, length


def plan(a: VecdotArgs) -> Run | None:
    """The Triton plan for these arguments' signature, or None (the native call runs)."""
    dtype = _dtype(a)
    x1, x2 = a.x1, a.x2
    if x1.dtype is not dtype or x2.dtype is not dtype or torch.compiler.is_compiling():
        return None
    if torch.is_grad_enabled() and (x1.requires_grad or x2.requires_grad):
        return None
    kernels = _triton()
    if kernels is None:
        return None
    view = _rows_view(a)
    if view is None:
        return None
    _, _, strides, rows, length = view
    shape = list(torch.broadcast_shapes(x1.shape, x2.shape))
    if a.keepdims:
        shape[a.axis] = 1
    else:
        del shape[a.axis]
    device = x1.device
    # The row views start where the inputs do: the kernel takes the inputs' own
    # pointers with the views' strides.
    sms = _sms(device.index)
    return kernels.plan_rows(rows, length, strides, dtype, device, sms, tuple(shape))


def _torch_cuda(a: VecdotArgs) -> torch.Tensor:
    """Fused Triton row reduction for real floats, else the product and sum."""
    run = plan(a)
    return native(a) if run is None else run(a.x1, a.x2)


extend.register(
    "vecdot",
    "torch_cuda",
    libraries=("torch",),
    devices=("cuda",),
    priority=Priority.SPECIALIZED,
    planner=plan,
)(_torch_cuda)
