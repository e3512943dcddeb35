"""PyTorch shear / unshear on CPU and CUDA: zero-copy NumPy views to
:mod:`portops._shear.blocked` for plain CPU calls, strided torch ops otherwise; one
:class:`~.linear_op.LinearPair` for gradients.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ... import _buffers as buffers
from ... import _torch_state, extend
from ..._ops.shear import ShearArgs, growth, shear, unshear
from ..._shear import blocked, strided
from ..._strategy import FEATURES, Strategies, Strategy
from ...extend import Priority
from ..numpy import shear as numpy_kernels
from .linear_op import LinearPair, result_dtype
from .views import numpy_view

_NO_BUFFER = (torch.float16, torch.bfloat16, torch.bool)
_VIA_NUMPY = (
    torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
)  # fmt: skip


def _empty(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``; large CPU results come from portops' reused buffers."""
    if device.type == "cpu" and dtype not in _NO_BUFFER and not dtype.is_complex:
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        if math.prod(shape) * np_dtype.itemsize >= buffers.MIN_BYTES:
            return torch.from_numpy(buffers.empty(shape, np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def _via_numpy(a: ShearArgs) -> bool:
    """Whether shear can go to the (several times faster) NumPy kernels."""
    x = a.array
    return (
        x.device.type == "cpu" and x.dtype in _VIA_NUMPY and a.fractions is None and a.mask is None
    )


def _numpy_kernel(a: ShearArgs) -> torch.Tensor:
    """:func:`blocked.shear_into` on NumPy views, writing a new tensor."""
    out = _empty(list(a.shape), a.dtype, a.array.device)
    b = a._replace(array=numpy_view(a.array), xp=np)
    blocked.shear_into(out.numpy(), b, numpy_kernels.runner(b))
    return out


OPS = strided.Ops(
    torch,
    lambda a, v: a.as_strided(v.shape, v.strides, a.storage_offset() + v.offset),
    lambda a: tuple(a.stride()),
    torch.Tensor.zero_,
    torch.Tensor.copy_,
    lambda start, end, weight, out: torch.lerp(start, end, weight, out=out),
    torch.Tensor.to,
    lambda a: a.conj() if a.is_complex() else a,
)


def _strided_kernel(adjoint: bool, a: ShearArgs) -> torch.Tensor:
    device = a.array.device
    kernel = strided.unshear if adjoint else strided.shear
    out: torch.Tensor = kernel(OPS, lambda shape, dtype: _empty(shape, dtype, device), a)
    return out


def _shape(adjoint: bool, shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    """The result's shape: the shifted axis lengthened (shear) or shortened."""
    offsets, fractions, axis, _ = geometry
    grow = growth(tuple(offsets), tuple(fractions) or None)
    out = list(shape)
    out[axis] += -grow if adjoint else grow
    return out


def _op_kernel(adjoint: bool, arr: torch.Tensor, *rest: Any) -> torch.Tensor:
    """A custom operator's call (``*geometry, mask``): always torch's strided kernel."""
    *geometry, mask = rest
    offsets, fractions, axis, cax = geometry
    shape = tuple(_shape(adjoint, list(arr.shape), tuple(geometry)))
    fractions = tuple(fractions) or None
    a = ShearArgs(
        arr, tuple(offsets), fractions, axis, cax, mask, torch, result_dtype(arr, mask), shape
    )
    return _strided_kernel(adjoint, a)


@torch.library.custom_op("portops::shear", mutates_args=())
def shear_op(
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """The sheared cube; `fractions` is empty for integer dispersion."""
    return _op_kernel(False, x, offsets, fractions, axis, channel_axis, mask)


@torch.library.custom_op("portops::unshear", mutates_args=())
def unshear_op(
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Every channel's window of the sheared cube `y`, times the conjugated mask."""
    return _op_kernel(True, y, offsets, fractions, axis, channel_axis, mask)


def _public(
    adjoint: bool, arr: torch.Tensor, mask: torch.Tensor | None, geometry: Any
) -> torch.Tensor:
    """The public function, for the pair's gradients, tangents and vmap rule."""
    offsets, fractions, axis, cax = geometry
    step = [n + f for n, f in zip(offsets, fractions, strict=True)] if fractions else offsets
    public = unshear if adjoint else shear
    out: torch.Tensor = public(arr, step, axis=axis, channel_axis=cax, mask=mask)
    return out


PAIR = LinearPair(
    shear_op,
    unshear_op,
    functools.partial(_shape, False),
    functools.partial(_shape, True),
    functools.partial(_public, False),
    functools.partial(_public, True),
    axes=(2, 3),
)
PAIR.register()


def _needs(a: ShearArgs) -> frozenset[str]:
    return _torch_state.needs((a.array, a.mask))


def _plan(a: ShearArgs, adjoint: bool, kernel: Callable[[ShearArgs], torch.Tensor]) -> Any:
    """The kernel directly, through the Function when the call needs autograd,
    forward-mode AD or torch.func, or the custom operator under torch.compile."""
    geometry = (list(a.offsets), list(a.fractions or ()), a.axis, a.channel_axis)
    needs = _needs(a)
    template = a._replace(array=None, mask=None)  # the plan keeps no tensor alive
    shape, dtype = ((), None) if a.mask is None else (tuple(a.mask.shape), a.mask.dtype)

    def direct(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        return kernel(template._replace(array=arr, mask=m))

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        if m is not None:  # cast from bool and reshaped, as validation did (idempotent)
            m = m.to(dtype) if m.dtype != dtype else m
            m = m if m.shape == shape else m.reshape(shape)
        if "compile" in needs:
            return PAIR.call_op(adjoint, arr, m, geometry)
        if needs:
            return PAIR.apply(adjoint, arr, m, geometry, direct)
        return direct(arr, m)

    return run


def choose_shear(a: ShearArgs) -> tuple[str, str]:
    needs = _needs(a)
    if needs:
        return "strided", f"needs {', '.join(sorted(needs))}: torch's own ops only"
    if _via_numpy(a):
        return "numpy", "CPU, integer offsets, no mask: NumPy's cache-sized blocks on views"
    return "strided", "strided zero-fill and one copy into the windows' view"


_SHEAR = Strategies(
    [
        Strategy(
            "numpy",
            "NumPy's cache-sized blocks on zero-copy views (CPU, integer offsets, no mask)",
            lambda a: _plan(a, False, _numpy_kernel),
            frozenset(),
            numpy_kernels.threads,
            lambda a: (
                None if _via_numpy(a) else "CPU, a NumPy dtype, integer offsets, no mask only"
            ),
        ),
        Strategy(
            "strided",
            "strided zero-fill and one copy_ (or mul, lerp) into the windows' view",
            lambda a: _plan(a, False, functools.partial(_strided_kernel, False)),
            FEATURES,
        ),
    ],
    choose=choose_shear,
    needs=_needs,
)
_UNSHEAR = Strategies(
    [
        Strategy(
            "strided",
            "one copy_ of the windows' strided view, mask fused",
            lambda a: _plan(a, True, functools.partial(_strided_kernel, True)),
            FEATURES,
        )
    ],
    choose=lambda a: ("strided", "one strided read of every window"),
    needs=_needs,
)

for _op, _what, _strategies in (
    ("shear", "strided zero-fill and one copy_ into the windows' view", _SHEAR),
    ("unshear", "one copy_ of the windows' strided view, mask fused", _UNSHEAR),
):
    extend.register(
        _op,
        "torch_strided",
        libraries=["torch"],
        priority=Priority.SPECIALIZED,
        summary=f"{_what}; every autograd feature",
        strategies=_strategies,
    )
