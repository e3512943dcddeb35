"""shear / unshear for NumPy on the CPU: one cache-sized block of the result at a time.

The result is cut into blocks of about :func:`block_bytes` along the axes before the
shifted one (never along it, so each block holds whole windows); the blocks are the
units portops' threads share. Each block of the sheared cube is zeroed and its windows
copied in while it sits in the core's cache, so the cube goes to memory once, never as
a zero-fill followed by a second strided pass.

Channels are handled in groups whose windows form one strided view (see
:func:`portops._shear.layout.channel_groups`): one copy per group and block, with the
mask multiplied in on the way. Fractional offsets take two passes per group:
``(1 - f) * x`` at ``n`` and ``f * x`` added at ``n + 1``. torch CPU tensors come
through zero-copy NumPy views.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from .. import _buffers as buffers
from .. import _machine
from .._ops.shear import ShearArgs
from .._tables import NUMPY
from .layout import ChannelGroup, channel_groups, group_view, select
from .strided import numpy_like, write

__all__ = ["Run", "block_bytes", "blocks", "shear", "shear_into", "unshear"]

_NP = numpy_like(np)
Unit = tuple[slice, ...]
# Runs ``work`` over every unit, maybe spread over threads (each call of `work` gets
# an iterable of units).
Run = Callable[[list[Any], Callable[[Iterable[Any]], None]], None]


def block_bytes() -> int:
    """Bytes of the result per block: ``block_fraction`` of one core's L2, so that a
    block and what it reads stay cached together, and large enough that the few NumPy
    calls per block (microseconds each) stay small beside its copy."""
    return int(NUMPY["block_fraction"] * _machine.current().l2)


def blocks(shape: tuple[int, ...], axis: int, itemsize: int) -> list[Unit]:
    """Index tuples that tile a C-contiguous array of `shape` into contiguous blocks of
    about :func:`block_bytes`, each whole along `axis` and every axis after it (a block
    may be larger to stay so)."""
    target = block_bytes()
    if axis == 0 or math.prod(shape) == 0:
        return [tuple(slice(None) for _ in shape)]
    tail = itemsize * math.prod(shape[axis:])
    cut = axis - 1  # the axis cut into chunks; the ones before it are indexed singly
    while cut > 0 and tail * shape[cut] <= target:
        tail *= shape[cut]
        cut -= 1
    chunk = max(1, target // tail)
    rest = tuple(slice(None) for _ in shape[cut + 1 :])
    return [
        (*(slice(i, i + 1) for i in prefix), slice(start, min(start + chunk, shape[cut])), *rest)
        for prefix in itertools.product(*(range(n) for n in shape[:cut]))
        for start in range(0, shape[cut], chunk)
    ]


def _sub(a: Any, unit: Unit) -> Any:
    """`a`'s part of a unit; axes `a` broadcasts (size 1) are kept whole."""
    return a[tuple(slice(None) if n == 1 else s for n, s in zip(a.shape, unit, strict=False))]


def _fill_zero(block: Any) -> None:
    """Zero a block; as bytes where it is contiguous (NumPy then calls ``memset``,
    about 1.7 times faster in the cache)."""
    if block.flags.c_contiguous:
        block = block.reshape(-1).view(np.uint8)
    block.fill(0)


class _Group(NamedTuple):
    """One channel group, as whole-array views that each unit slices."""

    group: ChannelGroup
    windows: Any  # the group's windows in the sheared cube (x's shape, group's channels)
    later: Any  # the same moved on by one (fractional groups), else None
    array: Any  # the group's channels of x (shear) or of the result (unshear)
    mask: Any  # the group's channels of the mask, or None


def _groups(cube: Any, flat: Any, mask: Any, a: ShearArgs) -> list[_Group]:
    """The channel groups of `a`; `flat` is the array shaped like x."""
    ax, cax = a.axis, a.channel_axis
    strides = _NP.strides(cube)
    out = []
    for g in channel_groups(a.offsets, a.fractions):
        arr = select(flat, cax, g)
        shape, width = tuple(arr.shape), arr.shape[ax]
        windows = _NP.view(cube, group_view(strides, shape, ax, cax, g, 0, width))
        later = None
        if g.fraction != 0:
            later = _NP.view(cube, group_view(strides, shape, ax, cax, g, 1, width))
        out.append(_Group(g, windows, later, arr, select(mask, cax, g)))
    return out


def _in_unit(unit: Unit, cax: int, g: ChannelGroup, channels: int) -> Unit | None:
    """`unit` with its channel range turned into positions within the group, or None
    when none of the group's channels fall in it."""
    s = unit[cax]
    start, stop = s.start or 0, channels if s.stop is None else s.stop
    first = max(0, -(-(start - g.start) // g.every))
    last = min(g.size, -(-(stop - g.start) // g.every))
    if first >= last:
        return None
    return (*unit[:cax], slice(first, last), *unit[cax + 1 :])


def shear_into(out: np.ndarray, a: ShearArgs, run: Run) -> None:
    """Fill the C-contiguous sheared cube `out` block by block."""
    x, ax, cax = a.array, a.axis, a.channel_axis
    if out.size == 0:
        return
    groups = _groups(out, x, a.mask, a)

    def work(todo: Iterable[Unit]) -> None:
        for unit in todo:
            _fill_zero(out[unit])
            for g in groups:
                part = _in_unit(unit, cax, g.group, x.shape[cax])
                if part is None:
                    continue
                dst, xg = g.windows[part], g.array[part]
                mg = None if g.mask is None else _sub(g.mask, part)
                f = g.group.fraction
                if f == 0:
                    write(_NP, dst, xg, mg)
                    continue
                z = xg if mg is None else np.multiply(xg, mg, dtype=out.dtype)
                np.multiply(z, 1 - f, out=dst)
                later = g.later[part]
                np.add(later, z * f, out=later)

    run(blocks(tuple(out.shape), ax, out.itemsize), work)


def shear(a: ShearArgs, run: Run) -> np.ndarray:
    """The sheared cube, from :func:`shear_into`."""
    out = buffers.empty(list(a.shape), a.dtype)
    shear_into(out, a, run)
    return out


def unshear(a: ShearArgs, run: Run) -> np.ndarray:
    """Every window of ``y`` times the conjugated mask, block by block."""
    y, ax, cax = a.array, a.axis, a.channel_axis
    out = buffers.empty(list(a.shape), a.dtype)
    if out.size == 0:
        return out
    mask = a.mask if a.mask is None else _NP.conj(a.mask)
    groups = _groups(y, out, mask, a)

    def work(todo: Iterable[Unit]) -> None:
        for unit in todo:
            for g in groups:
                part = _in_unit(unit, cax, g.group, out.shape[cax])
                if part is None:
                    continue
                dst, now = g.array[part], g.windows[part]
                mg = None if g.mask is None else _sub(g.mask, part)
                f = g.group.fraction
                if f == 0:
                    write(_NP, dst, now, mg)
                    continue
                _NP.lerp(now, g.later[part], f, dst)
                if mg is not None:
                    np.multiply(dst, mg, out=dst)

    run(blocks(tuple(out.shape), ax, out.itemsize), work)
    return out
