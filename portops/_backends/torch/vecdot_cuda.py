"""vecdot on CUDA tensors: ``triton``, a fused row reduction (each input read once) for
real floating inputs whose batch dims merge into rows; ``native``, torch's product and
sum, for the rest (other dtypes and layouts, autograd, torch.func, compile)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache, partial

import torch

from ... import _machine, _torch_state, extend
from ..._ops.vecdot import VecdotArgs
from ..._strategy import FEATURES, Strategies, Strategy
from ...extend import Priority
from .triton_loader import triton_kernels
from .vecdot import STRATEGIES as CPU_STRATEGIES

Run = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_triton = partial(triton_kernels, "_triton_vecdot")


@cache
def _sms(device: int) -> int:
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def _triton_plan(a: VecdotArgs) -> Run | None:
    """The Triton plan for these arguments' signature, or None where it does not apply."""
    x1, x2, kernels = a.x1, a.x2, _triton()
    if kernels is None or x1.dtype is not x2.dtype or not x1.dtype.is_floating_point:
        return None
    shape = torch.broadcast_shapes(x1.shape, x2.shape)  # type: ignore[no-untyped-call]
    ndim = len(shape)
    axis = ndim + a.axis
    rows = math.prod(n for d, n in enumerate(shape) if d != axis)
    length = shape[axis]
    strides: list[int] = []
    for x in (x1, x2):  # both inputs as (rows, length) views of one broadcast layout
        v = x.reshape((1,) * (ndim - x.ndim) + tuple(x.shape)).expand(shape)
        try:
            strides += v.movedim(axis, -1).view(rows, length).stride()
        except RuntimeError:  # the batch dims do not merge
            return None
    sms = _machine.current().gpu_sms or _sms(x1.device.index)
    run: Run | None = kernels.plan_rows(
        rows, length, tuple(strides), x1.dtype, x1.device, sms, tuple(a.shape)
    )
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
    return _triton_plan(a) or CPU_STRATEGIES.by_name["native"].plan(a)


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
