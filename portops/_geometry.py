"""Reduce any shift_sum layout to the fixed iteration space of the GPU kernels.

The kernels (``_kernels/shift_sum.cu`` and the Triton kernels of the torch CUDA path)
iterate over six dimensions shared by the array with channels (*big*: ``x``, or the
adjoint's result) and the one without (*small*: ``y``)::

    O0, O1, O2, W, I0, I1

three *outer* dims (those before the shifted axis), the shifted axis, two *inner* dims
(those after it), plus the channel dimension of the big array and of the mask. Strides
are in elements, so strided inputs need no copy; a broadcast mask has stride 0. Adjacent
dims merge when every array allows it, so the usual layouts fit; a layout that still
needs more dims is reported as such and the caller falls back to another implementation.

Pure Python on shapes and strides: no array library is imported.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Geometry", "contiguous_strides", "geometry", "linear_step"]

OUTER_SLOTS = 3
INNER_SLOTS = 2
# Offsets and counts at or above this need 64-bit index arithmetic in the kernels; the
# margin keeps a grid-stride loop's last increment (at most 2^24) from overflowing.
INT32_LIMIT = 2**31 - 2**24


class Geometry(NamedTuple):
    """Sizes and element strides over ``(O0, O1, O2, W, I0, I1)``.

    ``size[3]`` is the width of the big array along the shifted axis; ``out_width`` the
    small array's. ``mask`` strides are zeros when there is no mask.
    """

    size: tuple[int, ...]
    big: tuple[int, ...]
    mask: tuple[int, ...]
    small: tuple[int, ...]
    big_c: int
    mask_c: int
    channels: int
    out_width: int
    large: bool  # needs 64-bit indexing

    def elements(self, *, with_channels: bool) -> int:
        """Elements of the big (`with_channels`) or the small array."""
        n = math.prod(self.size[:3]) * math.prod(self.size[4:])
        return n * (self.channels * self.size[3] if with_channels else self.out_width)


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of `shape`."""
    strides = [0] * len(shape)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= max(1, shape[d])
    return tuple(strides)


def _merge(
    dims: list[int], sizes: tuple[int, ...], strides: list[tuple[int, ...]]
) -> list[tuple[int, list[int]]]:
    """Merge adjacent `dims` (size > 1 only) where every array's strides allow it.

    Returns ``(size, [stride per array])`` per merged dim, outermost first.
    """
    merged: list[tuple[int, list[int]]] = []
    for d in dims:
        if sizes[d] == 1:
            continue
        here = [s[d] for s in strides]
        if merged:
            size, prev = merged[-1]
            if all(p == sizes[d] * h for p, h in zip(prev, here, strict=True)):
                merged[-1] = (size * sizes[d], here)
                continue
        merged.append((sizes[d], here))
    return merged


def _reach(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int:
    return sum((n - 1) * abs(s) for n, s in zip(sizes, strides, strict=True) if n > 0)


def geometry(
    big_shape: tuple[int, ...],
    big_strides: tuple[int, ...],
    small_strides: tuple[int, ...],
    mask_strides: tuple[int, ...] | None,
    axis: int,
    channel_axis: int,
    out_width: int,
) -> Geometry | None:
    """The kernels' view of one problem, or None when it needs more dims than they have.

    Parameters
    ----------
    big_shape, big_strides
        Shape and element strides of the array with channels (``x`` layout).
    small_strides
        Element strides of the array without channels, in the same layout (its
        channel axis has size 1; that stride is ignored).
    mask_strides
        Element strides of the mask broadcast to `big_shape` (0 where it has size 1).
    axis, channel_axis
        Non-negative axes in the ``x`` layout.
    out_width
        Length of the small array along `axis`.
    """
    ndim = len(big_shape)
    mstrides = mask_strides if mask_strides is not None else (0,) * ndim
    arrays = [big_strides, mstrides, small_strides]
    outer = [d for d in range(axis) if d != channel_axis]
    inner = [d for d in range(axis + 1, ndim) if d != channel_axis]
    merged_outer = _merge(outer, big_shape, arrays)
    merged_inner = _merge(inner, big_shape, arrays)
    if len(merged_outer) > OUTER_SLOTS or len(merged_inner) > INNER_SLOTS:
        return None
    pad = (1, [0, 0, 0])
    slots = (
        [pad] * (OUTER_SLOTS - len(merged_outer))
        + merged_outer
        + [(big_shape[axis], [s[axis] for s in arrays])]
        + merged_inner
        + [pad] * (INNER_SLOTS - len(merged_inner))
    )
    size = tuple(n for n, _ in slots)
    per_array = [tuple(st[i] for _, st in slots) for i in range(3)]
    channels = big_shape[channel_axis]
    g = Geometry(
        size=size,
        big=per_array[0],
        mask=per_array[1],
        small=per_array[2],
        big_c=big_strides[channel_axis],
        mask_c=mstrides[channel_axis],
        channels=channels,
        out_width=out_width,
        large=False,
    )
    out_size = (*size[:3], out_width, *size[4:])
    reach = max(
        _reach(size, g.big) + (channels - 1) * abs(g.big_c),
        _reach(size, g.mask) + (channels - 1) * abs(g.mask_c),
        _reach(out_size, g.small),
        g.elements(with_channels=True),
        g.elements(with_channels=False),
        out_width + abs(out_width - size[3]) * max(channels, 1),
    )
    return g._replace(large=reach >= INT32_LIMIT)


def linear_step(offsets: tuple[int, ...]) -> tuple[int, int] | None:
    """``(step, base)`` with ``o_c == c * step + base`` for every channel, or None."""
    if len(offsets) == 1:
        return 0, offsets[0]
    step = offsets[1] - offsets[0]
    base = offsets[0]
    if all(o == c * step + base for c, o in enumerate(offsets)):
        return step, base
    return None
