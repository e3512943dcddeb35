"""Strided views that turn shear / unshear into a few zero-fills and one copy per
evenly stepped channel group. Pure Python on shapes and element strides.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._kernels.geometry import contiguous_strides, linear_step

__all__ = ["ChannelGroup", "View", "channel_groups", "gap_views", "group_view", "select", "take"]


class View(NamedTuple):
    """A strided view: shape, element strides and element offset."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


def gap_views(
    wide_shape: tuple[int, ...], axis: int, channel_axis: int, offsets: tuple[int, ...], width: int
) -> list[View] | None:
    """Views covering a sheared cube outside the windows (zero before copying), or None."""
    lin = linear_step(offsets)
    row = axis - 1
    if lin is None or row < 0 or channel_axis >= row:
        return None
    step, base = lin
    grow = wide_shape[axis] - width
    if grow == 0 or math.prod(wide_shape) == 0:
        return []
    strides = contiguous_strides(wide_shape)
    rows, inner = wide_shape[row], strides[axis]
    edge = tuple(1 if d == row else n for d, n in enumerate(wide_shape))
    views = [View(edge, strides, 0)]
    if rows > 1:
        middle = [*strides[:row], strides[row], 1]
        middle[channel_axis] += step * inner
        shape = (*wide_shape[:row], rows - 1, grow * inner)
        views.append(View(shape, tuple(middle), (base + width) * inner))
        views.append(View(edge, strides, (rows - 1) * strides[row]))
    return views


class ChannelGroup(NamedTuple):
    """Channels ``start, start + every, ...`` (``size`` of them) sharing one sub-pixel
    fraction ``fraction``, with whole-pixel offsets ``first + i * step``."""

    start: int
    every: int
    size: int
    first: int
    step: int
    fraction: float


def channel_groups(
    offsets: tuple[int, ...], fractions: tuple[float, ...] | None
) -> list[ChannelGroup]:
    """Channels grouped so that each group is one strided view (a fractional step
    ``p / q`` gives ``q`` groups); channels that fit no progression stand alone."""
    by_fraction: dict[float, list[int]] = {}
    for c, f in enumerate(fractions or (0.0,) * len(offsets)):
        by_fraction.setdefault(f, []).append(c)
    groups = []
    for f, cs in by_fraction.items():
        if len(cs) > 1:
            every, step = cs[1] - cs[0], offsets[cs[1]] - offsets[cs[0]]
            if all(
                c == cs[0] + i * every and offsets[c] == offsets[cs[0]] + i * step
                for i, c in enumerate(cs)
            ):
                groups.append(ChannelGroup(cs[0], every, len(cs), offsets[cs[0]], step, f))
                continue
        groups += [ChannelGroup(c, 1, 1, offsets[c], 0, f) for c in cs]
    return groups


def group_view(
    strides: tuple[int, ...],
    shape: tuple[int, ...],
    axis: int,
    channel_axis: int,
    group: ChannelGroup,
    shift: int,
    length: int,
) -> View:
    """The view of `group`'s windows (moved on by `shift`, `length` long) in an array
    of element `strides`; its shape is `shape` with the group's channels and `length`."""
    view_shape = list(shape)
    view_shape[channel_axis], view_shape[axis] = group.size, length
    view_strides = list(strides)
    view_strides[channel_axis] = group.every * strides[channel_axis] + group.step * strides[axis]
    offset = group.start * strides[channel_axis] + (group.first + shift) * strides[axis]
    return View(tuple(view_shape), tuple(view_strides), offset)


def take(a: Any, axis: int, start: int, stop: int, step: int | None = None) -> Any:
    """``a[start:stop:step]`` along `axis`."""
    idx: list[Any] = [slice(None)] * a.ndim
    idx[axis] = slice(start, stop, step)
    return a[tuple(idx)]


def select(a: Any, channel_axis: int, group: ChannelGroup) -> Any:
    """`group`'s channels of `a` (all of a broadcast channel axis); None stays None."""
    if a is None or a.shape[channel_axis] == 1:
        return a
    stop = group.start + group.every * (group.size - 1) + 1
    return take(a, channel_axis, group.start, stop, group.every)
