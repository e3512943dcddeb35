"""Reduce any shift_sum layout to the GPU kernels' fixed iteration space
``O0, O1, O2, W, I0, I1`` (element strides, merged dims); None where it does not fit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._tables import CUDA

OUTER_SLOTS = 3
INNER_SLOTS = 2
# 64-bit indices from here; the margin keeps grid-stride increments from overflowing.
INT32_LIMIT = 2**31 - 2**24


class Geometry(NamedTuple):
    """Sizes and element strides over ``(O0, O1, O2, W, I0, I1)``; ``size[3]`` is the
    big array's width, ``out_width`` the small one's; mask strides are 0 without a mask."""

    size: tuple[int, ...]
    big: tuple[int, ...]
    mask: tuple[int, ...]
    small: tuple[int, ...]
    big_c: int
    mask_c: int
    channels: int
    out_width: int
    large: bool  # needs 64-bit indexing


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
    """``(size, [stride per array])`` per dim of `dims` (size > 1), outermost first,
    adjacent ones merged where every array's strides allow it."""
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
    """The kernels' view of one problem (element strides), or None if it needs more dims."""
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
    big, mask, small = (tuple(st[i] for _, st in slots) for i in range(3))
    channels = big_shape[channel_axis]
    big_c, mask_c = big_strides[channel_axis], mstrides[channel_axis]
    per_width = math.prod(size[:3]) * math.prod(size[4:])
    reach = max(
        _reach(size, big) + (channels - 1) * abs(big_c),
        _reach(size, mask) + (channels - 1) * abs(mask_c),
        _reach((*size[:3], out_width, *size[4:]), small),
        per_width * channels * size[3],
        per_width * out_width,
        out_width + abs(out_width - size[3]) * max(channels, 1),
    )
    large = reach >= INT32_LIMIT
    return Geometry(size, big, mask, small, big_c, mask_c, channels, out_width, large)


def linear_step(offsets: tuple[int, ...]) -> tuple[int, int] | None:
    """``(step, base)`` with ``o_c == c * step + base`` for every channel, or None."""
    base = offsets[0]
    step = offsets[1] - base if len(offsets) > 1 else 0
    linear = all(o == c * step + base for c, o in enumerate(offsets))
    return (step, base) if linear else None


class RowView(NamedTuple):
    """The row kernels' view: outer rows, columns merging the shifted axis with the
    inner axes (``inner`` per position); channel ``c`` is shifted by ``o_c * inner``."""

    rows: int
    s1: int
    s2: int
    inner: int
    width: int  # columns of the big array
    out_width: int  # columns of the small array
    big: tuple[int, int, int]
    small: tuple[int, int, int]
    mask: tuple[int, int, int]
    big_c: int
    mask_c: int
    mask_j: int  # the mask's stride per column
    large: bool


def row_view(g: Geometry, has_mask: bool) -> RowView | None:
    """`g` as rows and contiguous columns, or None when the row kernels do not cover it."""
    inner = g.size[4]
    if g.size[5] != 1 or g.channels > CUDA["unroll_channels"]:  # Triton unrolls the loop
        return None
    for strides in (g.big, g.small):
        if strides[3] != inner or (inner > 1 and strides[4] != 1):
            return None
    if has_mask and inner > 1 and g.mask[3] != inner * g.mask[4]:
        return None
    return RowView(
        rows=g.size[0] * g.size[1] * g.size[2],
        s1=g.size[1],
        s2=g.size[2],
        inner=inner,
        width=g.size[3] * inner,
        out_width=g.out_width * inner,
        big=(g.big[0], g.big[1], g.big[2]),
        small=(g.small[0], g.small[1], g.small[2]),
        mask=(g.mask[0], g.mask[1], g.mask[2]),
        big_c=g.big_c,
        mask_c=g.mask_c,
        mask_j=g.mask[3] if inner == 1 else g.mask[4],
        large=g.large,
    )


def inverse_phi_rows(r: RowView, has_mask: bool) -> tuple[RowView, tuple[int, int, int]]:
    """The rows of the pseudo-inverse's ``1 / Phi`` (the small array's columns over the
    mask's outer extent, the mask's strides 0 where it broadcasts) and their strides."""
    sizes = (r.rows // (r.s1 * r.s2) if r.s1 * r.s2 else 0, r.s1, r.s2)
    o0, o1, o2 = (n if has_mask and st != 0 else 1 for n, st in zip(sizes, r.mask, strict=True))
    dense = (o1 * o2 * r.out_width, o2 * r.out_width, r.out_width)
    q0, q1, q2 = (0 if n == 1 else s for n, s in zip((o0, o1, o2), dense, strict=True))
    m0, m1, m2 = (st if n > 1 else 0 for n, st in zip((o0, o1, o2), r.mask, strict=True))
    return r._replace(rows=o0 * o1 * o2, s1=o1, s2=o2, mask=(m0, m1, m2)), (q0, q1, q2)


WARP = 32  # lanes of a warp (NVIDIA hardware)


def row_block(columns: int) -> int:
    """Columns per row program: the power of two covering `columns`, between one per lane
    and ``row_block_max`` (whole rows beat tighter blocks on an H100: more loads in flight)."""
    block: int = WARP * CUDA["row_warps"]
    while block < columns and block < CUDA["row_block_max"]:
        block *= 2
    return block


def row_warps(block: int) -> int:
    """Warps per row program: ``row_warps``, twice that for the widest block."""
    warps: int = CUDA["row_warps"]
    return 2 * warps if block >= CUDA["row_block_max"] else warps
