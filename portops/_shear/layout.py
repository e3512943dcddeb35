"""Strided views that turn shear / unshear into one zero-fill and one copy.

With evenly spaced offsets ``o_c = base + c * step``, channel ``c``'s window of the
sheared cube starts ``step`` elements of the shifted axis further than channel
``c - 1``'s. So all windows together are one strided view of the sheared cube: its
shape is ``x``'s and its channel stride is the cube's channel stride plus ``step``
times its axis stride. Shear copies ``x`` into that view; unshear copies the view out.

The zeros shear must write around the windows are strided views too, when the cube is
C-contiguous and the axis just before the shifted one holds rows (not channels): the
``grow`` elements after a row's window and before the next row's window are
contiguous in memory, at the same place relative to each row of a channel; so are the
elements between one channel's last window and the next channel's first.

Pure Python on shapes and element strides: no array library is imported.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .._kernels.geometry import contiguous_strides, linear_step

__all__ = ["View", "gap_views", "window_strides", "windows_view"]


class View(NamedTuple):
    """A strided view: shape, element strides and element offset."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


def window_strides(
    strides: tuple[int, ...], axis: int, channel_axis: int, step: int
) -> tuple[int, ...]:
    """Strides of the view of every channel's window: the channel stride moves on too."""
    out = list(strides)
    out[channel_axis] += step * strides[axis]
    return tuple(out)


def windows_view(
    wide_shape: tuple[int, ...],
    x_shape: tuple[int, ...],
    axis: int,
    channel_axis: int,
    offsets: tuple[int, ...],
) -> View | None:
    """The `x`-shaped view of every window of a C-contiguous sheared cube.

    None when the offsets are not evenly spaced or a stride would be negative (some
    libraries allow no negative strides; the callers then loop over channels).
    """
    lin = linear_step(offsets)
    if lin is None:
        return None
    step, base = lin
    strides = contiguous_strides(wide_shape)
    view_strides = window_strides(strides, axis, channel_axis, step)
    if min(view_strides) < 0:
        return None
    return View(tuple(x_shape), view_strides, base * strides[axis])


def gap_views(
    wide_shape: tuple[int, ...],
    axis: int,
    channel_axis: int,
    offsets: tuple[int, ...],
    width: int,
) -> list[View] | None:
    """Views covering every element of a C-contiguous sheared cube outside the windows.

    None when the layout does not allow it (offsets not evenly spaced, or the channel
    axis next to or after the shifted axis): then zero the whole cube. Where the
    channel axis comes right before the rows (``(B, C, H, W)``), the views cover the
    gaps exactly; otherwise the first and last row of every channel are covered whole,
    windows included, so zero them before copying the windows in.
    """
    lin = linear_step(offsets)
    row = axis - 1
    if lin is None or row < 0 or channel_axis >= row:
        return None
    step, base = lin
    grow = wide_shape[axis] - width
    strides = contiguous_strides(wide_shape)
    if grow == 0 or math.prod(wide_shape) == 0:
        return []
    rows = wide_shape[row]
    inner = strides[axis]  # elements per position along the shifted axis
    views = []
    if rows > 1:
        # From the end of row h's window to the start of row h + 1's: grow positions.
        middle = [*strides[:row], strides[row], 1]
        middle[channel_axis] += step * inner
        shape = (*wide_shape[:row], rows - 1, grow * inner)
        views.append(View(shape, tuple(middle), (base + width) * inner))
    if channel_axis == row - 1:
        views += _slab_boundaries(wide_shape, row, strides, step, base, width)
    else:
        edge_shape = tuple(1 if d == row else n for d, n in enumerate(wide_shape))
        views.append(View(edge_shape, strides, 0))
        if rows > 1:
            views.append(View(edge_shape, strides, (rows - 1) * strides[row]))
    return [v for v in views if math.prod(v.shape) > 0]


def _slab_boundaries(
    wide_shape: tuple[int, ...],
    row: int,
    strides: tuple[int, ...],
    step: int,
    base: int,
    width: int,
) -> list[View]:
    """The gaps between the last window of one (batch, channel) slab and the first of
    the next, for channels right before the rows.

    Between channel ``c`` and ``c + 1`` they are ``grow + step`` positions long; between
    one batch's last channel and the next batch's first, ``grow - (C - 1) * step``
    (none for a positive step); plus the head of the first slab and the tail of the
    last.
    """
    cax = row - 1
    channels, grow = wide_shape[cax], wide_shape[row + 1] - width
    inner = strides[row + 1]
    slab, batch_stride = strides[cax], strides[cax] * channels
    batches = math.prod(wide_shape[:cax])
    last_row = (wide_shape[row] - 1) * strides[row]
    last = base + (channels - 1) * step  # offset of the last channel
    views = [View((base * inner,), (1,), 0)]  # head of the first slab
    # tail of channel c's last row, then the head of channel c + 1's first row
    views.append(
        View(
            (batches, channels - 1, (grow + step) * inner),
            (batch_stride, slab + step * inner, 1),
            last_row + (base + width) * inner,
        )
    )
    across = (grow - last + base) * inner
    views.append(
        View(
            (batches - 1, across),
            (batch_stride, 1),
            (channels - 1) * slab + last_row + (last + width) * inner,
        )
    )
    tail = (grow - last) * inner
    views.append(View((tail,), (1,), batches * batch_stride - tail))
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


def channel_groups(offsets: tuple[int, ...], fractions: tuple[float, ...]) -> list[ChannelGroup]:
    """Channels grouped so that each group is one strided view (a fractional step
    ``p / q`` gives ``q`` groups); channels that fit no progression stand alone."""
    by_fraction: dict[float, list[int]] = {}
    for c, f in enumerate(fractions):
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


def write_masked(lib: Any, dst: Any, src: Any, mask: Any) -> None:
    """``dst[...] = src`` (times `mask` unless it is None), written in place."""
    if mask is None:
        lib.copyto(dst, src)
    else:
        lib.multiply(src, mask, out=dst)
