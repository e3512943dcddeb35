"""shear / unshear by strided views (zero the gaps, copy each channel group's windows),
for torch and CuPy through :class:`Ops`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from .._ops.shear import ShearArgs
from .layout import ChannelGroup, View, channel_groups, gap_views, group_view, select, take

Empty = Callable[[list[int], Any], Any]


class Ops(NamedTuple):
    """A library's array operations as the kernels use them; strides and offsets are in
    the library's units (bytes for NumPy, elements for torch)."""

    lib: Any  # the module: multiply(a, b, out=...), add(a, b, out=...)
    view: Callable[[Any, View], Any]  # the view of `a` (offset from its first element)
    strides: Callable[[Any], tuple[int, ...]]
    zero: Callable[[Any], Any]
    copy: Callable[[Any, Any], Any]  # copy(dst, src)
    lerp: Callable[[Any, Any, float, Any], Any]  # lerp(start, end, weight, out)
    astype: Callable[[Any, Any], Any]
    conj: Callable[[Any], Any]  # conjugated if complex


def numpy_like(lib: Any) -> Ops:
    """The :class:`Ops` of NumPy or a library sharing its API (CuPy)."""
    tricks = lib.lib.stride_tricks

    def view(a: Any, v: View) -> Any:
        # A 1-d view walks to the offset byte by byte (either way), then the view proper.
        n = abs(v.offset)
        start = tricks.as_strided(a, (n + 1,), (1 if v.offset >= 0 else -1,))[n:]
        return tricks.as_strided(start, v.shape, v.strides)

    def lerp(start: Any, end: Any, weight: float, out: Any) -> None:
        # In out's precision: float32 windows of a float64 result interpolate in float64.
        lib.multiply(start, 1 - weight, out=out, dtype=out.dtype)
        lib.add(out, lib.multiply(end, weight, dtype=out.dtype), out=out)

    return Ops(
        lib,
        view,
        lambda a: a.strides,
        lambda a: a.fill(0),
        lib.copyto,
        lerp,
        lambda a, dtype: a.astype(dtype),
        lambda a: lib.conj(a) if lib.iscomplexobj(a) else a,
    )


def write(ops: Ops, dst: Any, src: Any, mask: Any) -> None:
    """``dst[...] = src`` (times `mask` unless it is None), written in place."""
    if mask is None:
        ops.copy(dst, src)
    else:
        ops.lib.multiply(src, mask, out=dst)


def _groups(strides: tuple[int, ...], a: ShearArgs) -> list[ChannelGroup]:
    """Channel groups whose views need no negative stride (torch allows none): a group
    that would is split into its channels."""
    ax, cax = a.axis, a.channel_axis
    groups = []
    for g in channel_groups(a.offsets, a.fractions):
        if g.every * strides[cax] + g.step * strides[ax] >= 0:
            groups.append(g)
        else:
            channels = range(g.start, g.start + g.every * g.size, g.every)
            groups += [
                g._replace(start=c, every=1, size=1, first=a.offsets[c], step=0) for c in channels
            ]
    return groups


def shear(ops: Ops, empty: Empty, a: ShearArgs) -> Any:
    """The gaps zeroed, then ``x`` (times the mask) written into each group's windows."""
    x, offsets, fractions, ax, cax, mask = a[:6]
    width, shape = x.shape[ax], tuple(x.shape)
    out = empty(list(a.shape), a.dtype)
    if math.prod(a.shape) == 0:
        return out
    if mask is not None and mask.dtype != a.dtype:
        mask = ops.astype(mask, a.dtype)
    gaps = None if fractions else gap_views(a.shape, ax, cax, offsets, width)
    if gaps is None:
        ops.zero(out)
    strides = ops.strides(out)
    unit = strides[-1]  # one element: `out` is C-contiguous, gap_views counts elements
    for v in gaps or ():
        ops.zero(ops.view(out, View(v.shape, tuple(s * unit for s in v.strides), v.offset * unit)))

    def windows(g: ChannelGroup, shift: int, length: int) -> Any:
        return ops.view(out, group_view(strides, shape, ax, cax, g, shift, length))

    for g in _groups(strides, a):
        z, m, f = select(x, cax, g), select(mask, cax, g), g.fraction
        if f == 0:
            write(ops, windows(g, 0, width), z, m)
        elif width > 0:  # output n + w interpolates inputs w and w - 1
            z = ops.astype(z, a.dtype) if m is None else z * m
            ops.copy(windows(g, 0, 1), take(z, ax, 0, 1) * (1 - f))
            ops.copy(windows(g, width, 1), take(z, ax, width - 1, width) * f)
            if width > 1:
                later, earlier = take(z, ax, 1, width), take(z, ax, 0, width - 1)
                ops.lerp(later, earlier, f, windows(g, 1, width - 1))
    return out


def unshear(ops: Ops, empty: Empty, a: ShearArgs) -> Any:
    """Each group's windows of ``y`` copied out (interpolated), times the conjugated mask."""
    y, _, _, ax, cax, mask = a[:6]
    width = a.shape[ax]
    out = empty(list(a.shape), a.dtype)
    if math.prod(a.shape) == 0:
        return out
    mask = None if mask is None else ops.conj(mask)
    if mask is not None and mask.dtype != a.dtype:
        mask = ops.astype(mask, a.dtype)
    strides = ops.strides(y)
    for g in _groups(strides, a):
        dst, m = select(out, cax, g), select(mask, cax, g)
        now = ops.view(y, group_view(strides, a.shape, ax, cax, g, 0, width))
        if g.fraction == 0:
            write(ops, dst, now, m)
            continue
        after = ops.view(y, group_view(strides, a.shape, ax, cax, g, 1, width))
        if now.dtype != a.dtype:
            now, after = ops.astype(now, a.dtype), ops.astype(after, a.dtype)
        ops.lerp(now, after, g.fraction, dst)
        if m is not None:
            ops.lib.multiply(dst, m, out=dst)
    return out
