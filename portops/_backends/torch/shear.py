"""PyTorch shear / unshear on CPU and CUDA: zero-copy NumPy views to
:mod:`portops._shear.blocked` for plain CPU calls, strided torch ops otherwise; one
:class:`~.linear_op.LinearPair` for gradients.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from ... import extend
from ..._ops.shear import ShearArgs, growth, shear, unshear
from ..._shear import blocked, strided
from ..._strategy import FEATURES, Strategies, Strategy
from ...extend import Priority
from ..numpy import shear as numpy_kernels
from .linear_op import LinearPair, result_dtype
from .shift_sum import empty, needs_of, normalizer
from .views import NUMPY_DTYPES, numpy_view


def _empty(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``; large real CPU results come from portops' reused buffers."""
    if dtype.is_complex:
        return torch.empty(shape, dtype=dtype, device=device)
    return empty(shape, dtype, device)


def _via_numpy(a: ShearArgs) -> bool:
    """Whether shear can go to the (several times faster) NumPy kernels."""
    x = a.array
    plain = a.fractions is None and a.mask is None
    return x.device.type == "cpu" and x.dtype in NUMPY_DTYPES and plain


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
    return cast("torch.Tensor", kernel(OPS, lambda shape, dtype: _empty(shape, dtype, device), a))


def _shape(adjoint: bool, shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    """The result's shape: the shifted axis lengthened (shear) or shortened."""
    offsets, fractions, axis, _ = geometry
    grow = growth(tuple(offsets), tuple(fractions) or None)
    out = list(shape)
    out[axis] += -grow if adjoint else grow
    return out


def _op_kernel(adjoint: bool, arr: torch.Tensor, *rest: Any) -> torch.Tensor:
    """A custom operator's call (``*geometry, mask``; `fractions` empty for integer
    dispersion): always torch's strided kernel."""
    *geometry, mask = rest
    offsets, fractions, axis, cax = geometry
    shape = tuple(_shape(adjoint, list(arr.shape), tuple(geometry)))
    fractions, dtype = tuple(fractions) or None, result_dtype(arr, mask)
    a = ShearArgs(arr, tuple(offsets), fractions, axis, cax, mask, torch, dtype, shape)
    return _strided_kernel(adjoint, a)


def _public(adjoint: bool, arr: torch.Tensor, m: torch.Tensor | None, g: Any) -> torch.Tensor:
    """The public function, for the pair's gradients, tangents and vmap rule."""
    offsets, fractions, axis, cax = g
    step = [n + f for n, f in zip(offsets, fractions, strict=True)] if fractions else offsets
    return (unshear if adjoint else shear)(arr, step, axis=axis, channel_axis=cax, mask=m)


PAIR = LinearPair(
    ("shear", "unshear"),
    "SymInt[] offsets, float[] fractions, SymInt axis, SymInt channel_axis, Tensor? mask",
    _op_kernel,
    _shape,
    _public,
    (2, 3),
)


def _plan(a: ShearArgs, adjoint: bool, kernel: Callable[[ShearArgs], torch.Tensor]) -> Any:
    """The kernel directly, through the Function when the call needs autograd,
    forward-mode AD or torch.func, or the custom operator under torch.compile."""
    geometry = (list(a.offsets), list(a.fractions or ()), a.axis, a.channel_axis)
    needs = needs_of(a)
    template = a._replace(array=None, mask=None)  # the plan keeps no tensor alive
    normalize = normalizer(a)

    def direct(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        return kernel(template._replace(array=arr, mask=m))

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        arr, m = normalize(arr, m)
        if "compile" in needs:
            return PAIR.call_op(adjoint, arr, m, geometry)
        return PAIR.apply(adjoint, arr, m, geometry, direct) if needs else direct(arr, m)

    return run


def choose_shear(a: ShearArgs) -> tuple[str, str]:
    if needs := needs_of(a):
        return "strided", f"needs {', '.join(sorted(needs))}: torch's own ops only"
    if _via_numpy(a):
        return "numpy", "CPU, integer offsets, no mask: NumPy's cache-sized blocks on views"
    return "strided", "strided zero-fill and one copy into the windows' view"


def _strided(adjoint: bool, summary: str) -> Strategy:
    kernel = functools.partial(_strided_kernel, adjoint)
    return Strategy("strided", summary, lambda a: _plan(a, adjoint, kernel), FEATURES)


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
        _strided(False, "strided zero-fill and one copy_ (or mul, lerp) into the windows' view"),
    ],
    choose=choose_shear,
    needs=needs_of,
)
_UNSHEAR = Strategies(
    [_strided(True, "one copy_ of the windows' strided view, mask fused")],
    choose=lambda a: ("strided", "one strided read of every window"),
    needs=needs_of,
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
