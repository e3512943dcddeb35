"""Strided views that turn shear / unshear into one zero-fill and one copy.

With evenly spaced offsets ``o_c = base + c * step``, channel ``c``'s window of the
sheared cube starts ``step`` elements of the shifted axis further than channel
``c - 1``'s. So all windows together are one strided view of the sheared cube: its
shape is ``x``'s and its channel stride is the cube's channel stride plus ``step``
times its axis stride. Shear copies ``x`` into that view; unshear copies the view out.

The zeros shear must write around the windows are strided views too, when the cube is
C-contiguous and the axis just before the shifted one holds rows (not channels): the
``grow`` elements after a row's window and before the next row's window are
contiguous in memory, at the same place relative to each row of a channel. The first
and the last row of every channel are zeroed whole.

Pure Python on shapes and element strides: no array library is imported.
"""

from __future__ import annotations

from typing import NamedTuple

from ._geometry import contiguous_strides, linear_step

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

    They may cover some window elements too (the first and last rows): zero them
    before copying the windows in. None when the layout does not allow it (offsets
    not evenly spaced, or the channel axis next to or after the shifted axis): then
    zero the whole cube.
    """
    lin = linear_step(offsets)
    row = axis - 1
    if lin is None or row < 0 or channel_axis >= row:
        return None
    step, base = lin
    grow = wide_shape[axis] - width
    if grow == 0:
        return []
    strides = contiguous_strides(wide_shape)
    rows = wide_shape[row]
    inner = strides[axis]  # elements per position along the shifted axis
    edge_shape = tuple(1 if d == row else n for d, n in enumerate(wide_shape))
    views = [View(edge_shape, strides, 0)]
    if rows > 1:
        views.append(View(edge_shape, strides, (rows - 1) * strides[row]))
    if rows > 2:
        # From the end of row h's window to the start of row h + 1's: grow positions.
        middle = [*strides[:row], strides[row], 1]
        middle[channel_axis] += step * inner
        views.append(
            View(
                (*wide_shape[:row], rows - 1, grow * inner),
                tuple(middle),
                (base + width) * inner,
            )
        )
    return views
