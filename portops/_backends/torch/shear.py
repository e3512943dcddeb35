"""PyTorch shear / unshear: strided views and ``copy_``, the same ops on CPU and CUDA.

Kernels: on the CPU, shear of tensors of NumPy's dtypes without a mask or fractional
offsets goes through zero-copy NumPy views to the NumPy kernels
(:mod:`portops._shear.blocked`: cache-sized blocks over portops' threads), which write
the result tensor in place. Otherwise, shear zeroes the gaps around the
windows through a few ``as_strided`` views, then writes ``x`` (times the mask) into
the strided view of every window with one ``copy_`` (or ``mul``); unshear reads that
view of ``y`` with one copy. Fractional offsets take one ``lerp`` per group of
channels (sub-pixel dispersion by linear interpolation).

Gradients: shear and unshear are one :class:`~.linear_op.LinearPair` (shear's
backward is unshear and vice versa): the custom operators ``portops::shear`` /
``portops::unshear`` for ``torch.compile``, an ``autograd.Function`` for eager calls
that need gradients, forward-mode AD or ``torch.func``, the kernel itself otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ... import _buffers as buffers
from ... import _torch_state, extend
from ..._kernels.geometry import linear_step
from ..._ops.shear import ShearArgs
from ..._shear import blocked
from ..._shear.layout import (
    ChannelGroup,
    channel_groups,
    gap_views,
    group_view,
    window_strides,
    windows_view,
)
from ..._strategy import FEATURES, Strategies, Strategy
from ...extend import Priority
from ..numpy import shear as numpy_kernels
from .linear_op import LinearPair, result_dtype
from .views import numpy_view

_NO_BUFFER = (torch.float16, torch.bfloat16, torch.bool)
# CPU dtypes whose shear the NumPy kernels write through zero-copy views (see
# _via_numpy); half precision and bool stay in torch.
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


def _via_numpy(x: torch.Tensor, fractions: list[float], mask: torch.Tensor | None) -> bool:
    """Whether shear can go to the NumPy kernels: CPU, a dtype NumPy has, integer
    offsets and no mask. There its staged block copies beat torch's zero-fill and
    strided ``copy_``; with a mask or fractions (one ``mul`` / ``lerp`` pass) and for
    unshear (one strided read) torch's own vectorised loops are as fast or faster."""
    return x.device.type == "cpu" and x.dtype in _VIA_NUMPY and not fractions and mask is None


def _numpy_kernel(
    x: torch.Tensor, shape: list[int], offsets: list[int], axis: int, channel_axis: int
) -> torch.Tensor:
    """:func:`blocked.shear_into` on NumPy views, writing a new tensor of `shape`."""
    out = _empty(shape, x.dtype, x.device)
    a = ShearArgs.make("shear", numpy_view(x), tuple(offsets), None, axis, channel_axis, None, np)
    blocked.shear_into(np, out.numpy(), a, numpy_kernels.runner(out.numel() * x.element_size()))
    return out


def _growth(offsets: list[int], fractions: list[float]) -> int:
    if not fractions:
        return max(offsets)
    return max(n + (f > 0) for n, f in zip(offsets, fractions, strict=True))


def _channel(a: torch.Tensor, axis: int, c: int) -> torch.Tensor:
    return a if a.shape[axis] == 1 else a.narrow(axis, c, 1)


def _write(dst: torch.Tensor, src: torch.Tensor, mask: torch.Tensor | None) -> None:
    if mask is None:
        dst.copy_(src)
    else:
        torch.mul(src, mask, out=dst)


def _shear_kernel(
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Gaps zeroed through strided views, then ``x`` (times the mask) written into the
    strided view of every window with one ``copy_`` (or ``mul``)."""
    width = x.shape[axis]
    wide = list(x.shape)
    wide[axis] += _growth(offsets, fractions)
    dtype = result_dtype(x, mask)
    out = _empty(wide, dtype, x.device)
    if out.numel() == 0:
        return out
    if mask is not None and mask.dtype != dtype:
        mask = mask.to(dtype)
    if fractions:
        out.zero_()
        if width > 0:
            _fractional_shear(out, x, offsets, fractions, axis, channel_axis, mask)
        return out
    key = (tuple(wide), axis, channel_axis, tuple(offsets), width)
    gaps = gap_views(*key) if out.is_contiguous() else None
    if gaps is None:
        out.zero_()
    else:
        for v in gaps:
            out.as_strided(v.shape, v.strides, v.offset).zero_()
    view = windows_view(tuple(wide), tuple(x.shape), axis, channel_axis, tuple(offsets))
    if view is not None:
        _write(out.as_strided(view.shape, view.strides, view.offset), x, mask)
        return out
    for c, n in enumerate(offsets):
        dst = out.narrow(channel_axis, c, 1).narrow(axis, n, width)
        m = None if mask is None else _channel(mask, channel_axis, c)
        _write(dst, x.narrow(channel_axis, c, 1), m)
    return out


def _unshear_kernel(
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    width = y.shape[axis] - _growth(offsets, fractions)
    shape = list(y.shape)
    shape[axis] = width
    dtype = result_dtype(y, mask)
    out = _empty(shape, dtype, y.device)
    if out.numel() == 0:
        return out
    if mask is not None:
        mask = mask.conj() if mask.is_complex() else mask
        if mask.dtype != dtype:
            mask = mask.to(dtype)
    lin = None if fractions else linear_step(tuple(offsets))
    if lin is not None:
        step, base = lin
        strides = window_strides(tuple(y.stride()), axis, channel_axis, step)
        if min(strides) >= 0:
            start = y.storage_offset() + base * y.stride(axis)
            _write(out, y.as_strided(shape, strides, start), mask)
            return out
    if fractions:
        _fractional_unshear(out, y, offsets, fractions, axis, channel_axis, mask)
        return out
    for c, n in enumerate(offsets):
        m = None if mask is None else _channel(mask, channel_axis, c)
        window = y.narrow(channel_axis, c, 1).narrow(axis, n, width)
        _write(out.narrow(channel_axis, c, 1), window, m)
    return out


def _groups(
    a: torch.Tensor, offsets: list[int], fractions: list[float], axis: int, channel_axis: int
) -> list[ChannelGroup]:
    """Channel groups whose strided views `a` can take (no negative strides)."""
    groups = []
    for g in channel_groups(tuple(offsets), tuple(fractions)):
        stride = g.every * a.stride(channel_axis) + g.step * a.stride(axis)
        if stride >= 0:
            groups.append(g)
        else:
            groups += [
                g._replace(start=c, every=1, size=1, first=offsets[c], step=0)
                for c in range(g.start, g.start + g.every * g.size, g.every)
            ]
    return groups


def _select(a: torch.Tensor | None, channel_axis: int, g: ChannelGroup) -> torch.Tensor | None:
    """The group's channels of `a` (all of a broadcast channel axis)."""
    if a is None or a.shape[channel_axis] == 1:
        return a
    idx: list[Any] = [slice(None)] * a.ndim
    idx[channel_axis] = slice(g.start, g.start + g.every * (g.size - 1) + 1, g.every)
    return a[tuple(idx)]


def _view(
    a: torch.Tensor, shape: list[int], g: ChannelGroup, axis: int, cax: int, shift: int, length: int
) -> torch.Tensor:
    v = group_view(tuple(a.stride()), tuple(shape), axis, cax, g, shift, length)
    return a.as_strided(v.shape, v.strides, a.storage_offset() + v.offset)


def _fractional_shear(
    out: torch.Tensor,
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> None:
    """Each group of channels with one fraction ``f``: ``(1 - f)`` of pixel ``w`` to
    ``n + w`` and ``f`` to ``n + 1 + w``, i.e. output ``n + w`` is a lerp of inputs
    ``w`` and ``w - 1``."""
    width, shape = x.shape[axis], list(x.shape)
    for g in _groups(out, offsets, fractions, axis, channel_axis):
        z = _select(x, channel_axis, g)
        assert z is not None
        m = _select(mask, channel_axis, g)
        z = z.to(out.dtype) if m is None else z * m
        f = g.fraction
        if f == 0:
            _view(out, shape, g, axis, channel_axis, 0, width).copy_(z)
            continue
        _view(out, shape, g, axis, channel_axis, 0, 1).copy_(z.narrow(axis, 0, 1) * (1 - f))
        last = z.narrow(axis, width - 1, 1) * f
        _view(out, shape, g, axis, channel_axis, width, 1).copy_(last)
        if width > 1:
            later, earlier = z.narrow(axis, 1, width - 1), z.narrow(axis, 0, width - 1)
            dst = _view(out, shape, g, axis, channel_axis, 1, width - 1)
            torch.lerp(later, earlier, f, out=dst)


def _fractional_unshear(
    out: torch.Tensor,
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> None:
    """``(1 - f) * y[n + w] + f * y[n + 1 + w]`` per group of channels, then the mask."""
    width, shape = out.shape[axis], list(out.shape)
    for g in _groups(y, offsets, fractions, axis, channel_axis):
        dst = _select(out, channel_axis, g)
        assert dst is not None
        now = _view(y, shape, g, axis, channel_axis, 0, width)
        if g.fraction == 0:
            dst.copy_(now)
        else:
            after = _view(y, shape, g, axis, channel_axis, 1, width)
            if now.dtype != out.dtype:
                now, after = now.to(out.dtype), after.to(out.dtype)
            torch.lerp(now, after, g.fraction, out=dst)
        m = _select(mask, channel_axis, g)
        if m is not None:
            dst.mul_(m)


def _shape_after(shape: list[int], axis: int, change: int) -> list[int]:
    out = list(shape)
    out[axis] += change
    return out


def _shape_after(shape: list[int], axis: int, change: int) -> list[int]:
    out = list(shape)
    out[axis] += change
    return out


def _sheared_shape(shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    offsets, fractions, axis, _ = geometry
    return _shape_after(shape, axis, _growth(offsets, fractions))


def _unsheared_shape(shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    offsets, fractions, axis, _ = geometry
    return _shape_after(shape, axis, -_growth(offsets, fractions))


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
    if _via_numpy(x, fractions, mask):
        return _numpy_kernel(x, _sheared_shape(list(x.shape), (offsets, fractions, axis, 0)),
                             offsets, axis, channel_axis)  # fmt: skip
    return _shear_kernel(x, offsets, fractions, axis, channel_axis, mask)


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
    return _unshear_kernel(y, offsets, fractions, axis, channel_axis, mask)


def _step(offsets: list[int], fractions: list[float]) -> list[int] | list[float]:
    """Offsets in the form the public functions take (they normalise them to these)."""
    if not fractions:
        return list(offsets)
    return [n + f for n, f in zip(offsets, fractions, strict=True)]


def _public_shear(x: torch.Tensor, mask: torch.Tensor | None, geometry: Any) -> torch.Tensor:
    from ..._ops.shear import shear as public

    offsets, fractions, axis, cax = geometry
    out: torch.Tensor = public(x, _step(offsets, fractions), axis=axis, channel_axis=cax, mask=mask)
    return out


def _public_unshear(y: torch.Tensor, mask: torch.Tensor | None, geometry: Any) -> torch.Tensor:
    from ..._ops.shear import unshear as public

    offsets, fractions, axis, cax = geometry
    out: torch.Tensor = public(y, _step(offsets, fractions), axis=axis, channel_axis=cax, mask=mask)
    return out


PAIR = LinearPair(
    shear_op,
    unshear_op,
    _sheared_shape,
    _unsheared_shape,
    _public_shear,
    _public_unshear,
    axes=(2, 3),
)
PAIR.register()


def _needs(a: ShearArgs) -> frozenset[str]:
    return _torch_state.needs((a.array, a.mask))


def _geometry(a: ShearArgs) -> tuple[Any, ...]:
    return (list(a.offsets), list(a.fractions or ()), a.axis, a.channel_axis)


def _normalizer(a: ShearArgs) -> Any:
    """The mask as validation made it (cast from bool, reshaped); idempotent."""
    mask = a.mask
    shape = None if mask is None else tuple(mask.shape)
    dtype = None if mask is None else mask.dtype

    def normalize(m: torch.Tensor | None) -> torch.Tensor | None:
        if m is not None:
            if m.dtype != dtype:
                m = m.to(dtype)
            if m.shape != shape:
                m = m.reshape(shape)
        return m

    return normalize


def _plan(a: ShearArgs, adjoint: bool, kernel: Any) -> Any:
    """The kernel directly, through the Function when the call needs autograd,
    forward-mode AD or torch.func, or the custom operator under torch.compile."""
    geometry = _geometry(a)
    normalize = _normalizer(a)
    needs = _needs(a)

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        m = normalize(m)
        if "compile" in needs:
            return PAIR.call_op(adjoint, arr, m, geometry)
        if needs:
            return PAIR.apply(adjoint, arr, m, geometry, kernel)
        return kernel(arr, m)

    return run


def _numpy_shear(a: ShearArgs) -> Any:
    offsets, axis, cax = list(a.offsets), a.axis, a.channel_axis
    wide = list(a.shape)
    return _plan(a, False, lambda x, m: _numpy_kernel(x, wide, offsets, axis, cax))


def _strided_shear(a: ShearArgs) -> Any:
    geometry = _geometry(a)
    return _plan(a, False, lambda x, m: _shear_kernel(x, *geometry, m))


def _strided_unshear(a: ShearArgs) -> Any:
    geometry = _geometry(a)
    return _plan(a, True, lambda y, m: _unshear_kernel(y, *geometry, m))


def choose_shear(a: ShearArgs) -> tuple[str, str]:
    fractions = list(a.fractions or ())
    if not _needs(a) - {"grad"} and _via_numpy(a.array, fractions, a.mask):
        return "numpy", "CPU, integer offsets, no mask: NumPy's cache-sized blocks on views"
    return "strided", "strided zero-fill and one copy into the windows' view"


_SHEAR = Strategies(
    [
        Strategy(
            "numpy",
            "NumPy's cache-sized blocks on zero-copy views (CPU, integer offsets, no mask)",
            _numpy_shear,
            frozenset({"grad"}),
            lambda a: numpy_kernels.threads(a),
            lambda a: (
                None
                if _via_numpy(a.array, list(a.fractions or ()), a.mask)
                else "CPU, a dtype NumPy shares, integer offsets and no mask only"
            ),
        ),
        Strategy(
            "strided",
            "strided zero-fill and one copy_ (or mul, lerp) into the windows' view",
            _strided_shear,
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
            _strided_unshear,
            FEATURES,
        )
    ],
    choose=lambda a: ("strided", "one strided read of every window"),
    needs=_needs,
)

extend.register(
    "shear",
    "torch_strided",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    summary="strided zero-fill and one copy_ into the windows' view; every autograd feature",
    strategies=_SHEAR,
)
extend.register(
    "unshear",
    "torch_strided",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    summary="one copy_ of the windows' strided view, mask fused; every autograd feature",
    strategies=_UNSHEAR,
)
