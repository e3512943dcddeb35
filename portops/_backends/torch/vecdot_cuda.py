"""vecdot on CUDA tensors, two strategies:

- ``triton``: real floating inputs whose batch dimensions (after broadcasting) merge
  into rows are reduced by :mod:`portops._backends.torch._triton_vecdot`: each input
  read once, no product temporary, one launch (two when too few rows need the
  contracted axis split), planned once per call signature;
- ``native``: everything else — complex and integer dtypes, layouts that do not merge,
  calls that need autograd, forward-mode AD, torch.func or compile — torch's product
  and sum (see :func:`portops._backends.torch.vecdot.mul_sum`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from ... import _machine, _torch_state, extend
from ..._ops.vecdot import VecdotArgs
from ..._strategy import FEATURES, Strategies, Strategy
from ...extend import Priority
from .vecdot import STRATEGIES as CPU_STRATEGIES

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


def _rows_view(a: VecdotArgs) -> tuple[Any, Any, tuple[int, ...], int, int] | None:
    """Both inputs as (rows, length) views of one broadcast layout, or None."""
    x1, x2 = a.x1, a.x2
    shape = torch.broadcast_shapes(x1.shape, x2.shape)  # type: ignore[no-untyped-call]
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


def _triton_plan(a: VecdotArgs) -> Run | None:
    """The Triton plan for these arguments' signature, or None where it does not apply."""
    dtype = _dtype(a)
    x1, x2 = a.x1, a.x2
    if x1.dtype is not dtype or x2.dtype is not dtype or not dtype.is_floating_point:
        return None
    kernels = _triton()
    if kernels is None:
        return None
    view = _rows_view(a)
    if view is None:
        return None
    _, _, strides, rows, length = view
    shape = list(torch.broadcast_shapes(x1.shape, x2.shape))  # type: ignore[no-untyped-call]
    if a.keepdims:
        shape[a.axis] = 1
    else:
        del shape[a.axis]
    device = x1.device
    sms = _machine.current().gpu_sms or _sms(device.index)
    run: Run | None = kernels.plan_rows(rows, length, strides, dtype, device, sms, tuple(shape))
    return run


def _needs(a: VecdotArgs) -> frozenset[str]:
    return _torch_state.needs((a.x1, a.x2))


def choose(a: VecdotArgs) -> tuple[str, str]:
    if _needs(a):
        return "native", "the call needs autograd, torch.func or compile: torch's own calls"
    if _triton_plan(a) is None:
        return "native", "not a real floating layout whose batch dims merge into rows"
    return "triton", "one fused Triton row reduction: each input read once"


def _plan_triton(a: VecdotArgs) -> Run:
    run = _triton_plan(a)
    return CPU_STRATEGIES.by_name["native"].plan(a) if run is None else run


STRATEGIES = Strategies(
    [
        Strategy(
            "native",
            "torch's product and sum (half in float32, unsigned in int64); every feature",
            CPU_STRATEGIES.by_name["native"].plan,
            FEATURES,
        ),
        Strategy("triton", "a fused Triton row reduction, one launch", _plan_triton),
    ],
    choose=choose,
    needs=_needs,
)

extend.register(
    "vecdot",
    "torch_cuda",
    libraries=("torch",),
    devices=("cuda",),
    priority=Priority.SPECIALIZED,
    summary="a fused Triton row reduction, or torch's product and sum; every autograd feature",
    strategies=STRATEGIES,
)
