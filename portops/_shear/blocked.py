"""shear / unshear for NumPy on the CPU: one cache-sized block of the result at a time.

The result is cut into blocks of about :func:`block_bytes` along the axes before the
shifted one (never along it, so each block holds whole windows); the blocks are the
units portops' threads share. Each block of the sheared cube is written while it sits
in the core's cache: its gaps zeroed and its windows copied in, so the cube goes to
memory once, in order, never as a zero-fill followed by a second strided pass.

Where a window's row is a contiguous run of bytes in both arrays (the shifted axis and
every axis after it contiguous), rows are copied as runs of bytes (a trailing ``uint8``
axis): one ``memcpy`` per row, whatever the axes after the shifted one. In the usual
``(..., C, rows..., W, inner...)`` layout with evenly spaced integer offsets, large
cubes are written through a zeroed stage (see :class:`_Staged`); elsewhere a block is
zeroed whole first.

Channels are handled in groups whose windows form one strided view (all of them for
evenly spaced integer offsets, see :func:`portops._shear.layout.channel_groups`): one
copy per group and block, with the mask multiplied in on the way. Fractional offsets
take two passes per group: ``(1 - f) * x`` at ``n`` and ``f * x`` added at ``n + 1``.

NumPy only (the module is passed in as ``lib``, so nothing is imported here); torch
CPU tensors come through zero-copy NumPy views.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .. import _machine
from .._kernels.geometry import contiguous_strides, linear_step
from .._ops.shear import ShearArgs
from .._tables import NUMPY
from .layout import ChannelGroup, channel_groups, write_masked

__all__ = [
    "block_bytes",
    "Run",
    "blocks",
    "serial",
    "shear",
    "shear_into",
    "unshear",
    "unshear_into",
]


def block_bytes() -> int:
    """Bytes of the result per block: ``block_fraction`` of one core's L2, so that a
    block and what it reads stay cached together, and large enough that the few NumPy
    calls per block (microseconds each) stay small beside its copy."""
    return int(NUMPY["block_fraction"] * _machine.current().l2)


Unit = tuple[slice, ...]
Empty = Callable[[list[int], Any], Any]
# Runs ``work`` over every unit, maybe spread over threads (each call of `work` gets
# an iterable of units; the default runs them all on this thread).
Run = Callable[[list[Any], Callable[[Iterable[Any]], None]], None]


def serial(units: list[Any], work: Callable[[Iterable[Any]], None]) -> None:
    work(units)


def blocks(
    shape: tuple[int, ...], axis: int, itemsize: int, target: int | None = None
) -> list[Unit]:
    """Index tuples that tile a C-contiguous array of `shape` into contiguous blocks
    of about `target` bytes (default :func:`block_bytes`), each whole along `axis` and
    every axis after it (a block may exceed `target` to stay so)."""
    target = block_bytes() if target is None else target
    ndim = len(shape)
    if axis == 0 or math.prod(shape) == 0:
        return [tuple(slice(None) for _ in shape)]
    tail = itemsize * math.prod(shape[axis:])
    cut = axis - 1  # the axis cut into chunks; the ones before it are indexed singly
    while cut > 0 and tail * shape[cut] <= target:
        tail *= shape[cut]
        cut -= 1
    chunk = max(1, target // tail)
    rest = tuple(slice(None) for _ in range(cut + 1, ndim))
    units = []
    for prefix in _indices(shape[:cut]):
        head = tuple(slice(i, i + 1) for i in prefix)
        for start in range(0, shape[cut], chunk):
            units.append((*head, slice(start, min(start + chunk, shape[cut])), *rest))
    return units


def _indices(shape: tuple[int, ...]) -> Iterable[tuple[int, ...]]:
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _indices(shape[1:]):
            yield (i, *rest)


def _sub(a: Any, unit: Unit) -> Any:
    """`a`'s part of a unit; axes `a` broadcasts (size 1) are kept whole."""
    return a[tuple(slice(None) if n == 1 else s for n, s in zip(a.shape, unit, strict=False))]


def _tail_contiguous(a: Any, axis: int) -> bool:
    """Whether `a`'s axes from `axis` on form one C-contiguous run of elements."""
    expected = a.itemsize
    for d in range(a.ndim - 1, axis - 1, -1):
        if a.shape[d] != 1 and a.strides[d] != expected:
            return False
        expected *= a.shape[d]
    return True


def _rows(lib: Any, a: Any, axis: int) -> Any:
    """`a` (axes from `axis` on contiguous, see :func:`_tail_contiguous`) as bytes, each
    run over those axes one row: shape ``(*a.shape[:axis], run bytes)``, a view.

    Not one raw-bytes (``V<run>``) element per row: NumPy keeps the GIL through copies
    of fewer than 500 elements, which would stall portops' other threads.
    """
    run = math.prod(a.shape[axis:])
    flat = a.reshape(*a.shape[:axis], run)
    assert lib.may_share_memory(flat, a) or a.size == 0  # a view, not a copy
    return flat.view(lib.uint8)


def _fill_zero(lib: Any, block: Any) -> None:
    """Zero a block; as bytes where it is contiguous (NumPy then calls ``memset``)."""
    if block.flags.c_contiguous:
        _rows(lib, block, 0).fill(0)
    else:
        block.fill(0)


def _group_view(
    lib: Any, a: Any, shape: tuple[int, ...], ax: int, cax: int, g: ChannelGroup, shift: int
) -> Any:
    """The view, shaped `shape`, of group `g`'s windows (moved on by `shift`) in the
    sheared cube `a`; a stride may be negative."""
    strides = list(a.strides)
    strides[cax] = g.every * a.strides[cax] + g.step * a.strides[ax]
    idx: list[Any] = [slice(None)] * a.ndim
    idx[cax] = slice(g.start, g.start + 1)
    idx[ax] = slice(g.first + shift, None)
    base = a[tuple(idx)]
    tricks = lib.lib.stride_tricks
    return tricks.as_strided(base, shape, tuple(strides), writeable=base.flags.writeable)


def _select(a: Any, cax: int, g: ChannelGroup) -> Any:
    """Group `g`'s channels of `a`, or all of a broadcast channel axis."""
    if a.shape[cax] == 1:
        return a
    idx: list[Any] = [slice(None)] * a.ndim
    idx[cax] = slice(g.start, g.start + g.every * (g.size - 1) + 1, g.every)
    return a[tuple(idx)]


def _local(g: ChannelGroup, start: int, stop: int) -> slice | None:
    """Which of `g`'s channels (by position in the group) fall in ``[start, stop)``."""
    first = max(0, -(-(start - g.start) // g.every))
    last = min(g.size, -(-(stop - g.start) // g.every))
    return slice(first, last) if first < last else None


class _Group(NamedTuple):
    """One channel group, as whole-array views that each unit slices."""

    group: ChannelGroup
    windows: Any  # the group's windows in the sheared cube (x's shape, group's channels)
    later: Any  # the same moved on by one (fractional groups), else None
    array: Any  # the group's channels of x (shear) or of the result (unshear)
    mask: Any  # the group's channels of the mask, or None


def _groups(lib: Any, cube: Any, flat: Any, mask: Any, a: ShearArgs) -> list[_Group]:
    """The channel groups of `a`; `flat` is the array shaped like x."""
    fractions = a.fractions or (0.0,) * len(a.offsets)
    out = []
    for g in channel_groups(a.offsets, fractions):
        arr = _select(flat, a.channel_axis, g)
        shape = tuple(arr.shape)
        windows = _group_view(lib, cube, shape, a.axis, a.channel_axis, g, 0)
        later = None
        if g.fraction != 0:
            later = _group_view(lib, cube, shape, a.axis, a.channel_axis, g, 1)
        m = None if mask is None else _select(mask, a.channel_axis, g)
        out.append(_Group(g, windows, later, arr, m))
    return out


def _in_unit(unit: Unit, cax: int, g: _Group, channels: int) -> Unit | None:
    """`unit` with its channel range turned into positions within the group."""
    s = unit[cax]
    start, stop = s.start or 0, channels if s.stop is None else s.stop
    local = _local(g.group, start, stop)
    if local is None:
        return None
    return (*unit[:cax], local, *unit[cax + 1 :])


# ---------------------------------------------------------------- shear


class _Staged(NamedTuple):
    """A sheared cube ``(*prefix, C, rows..., W + grow, inner...)`` with evenly spaced
    integer offsets, written one block of channels at a time through a stage.

    From the start of channel ``c``'s first window to the start of channel ``c + 1``'s,
    the cube holds ``span`` elements: the rows of the channel's windows, each followed
    by ``grow`` zeros (``grow + step`` after the last). The stage is a zeroed buffer
    laid out the same way for ``chunk`` channels; ``x`` (times the mask) is copied into
    its windows in the cache, then the stage goes to the cube in one contiguous copy,
    zeros and all. The stage's gaps are never written, so they stay zero.
    """

    flat: Any  # the cube, flat
    strides: tuple[int, ...]  # the cube's element strides
    span: int
    chunk: int
    head: int  # zeros before channel 0's first window
    tail: int  # zeros after channel C - 1's last window


def _staged_plan(lib: Any, out: Any, a: ShearArgs, step: int, base: int) -> _Staged:
    ax, cax = a.axis, a.channel_axis
    shape = tuple(out.shape)
    width, channels = a.array.shape[ax], shape[cax]
    inner = math.prod(shape[ax + 1 :])
    slab = math.prod(shape[cax + 1 :])
    last = base + (channels - 1) * step
    return _Staged(
        out.reshape(-1),
        contiguous_strides(shape),
        slab + step * inner,
        max(1, min(channels, block_bytes() // (slab * out.itemsize))),
        base * inner,
        (shape[ax] - width - last) * inner,
    )


def _staged_units(shape: tuple[int, ...], cax: int, chunk: int) -> list[Unit]:
    """Blocks of `chunk` channels (the axes before the channel axis indexed singly)."""
    rest = tuple(slice(None) for _ in shape[cax + 1 :])
    return [
        (*(slice(i, i + 1) for i in prefix), slice(c, min(c + chunk, shape[cax])), *rest)
        for prefix in _indices(shape[:cax])
        for c in range(0, shape[cax], chunk)
    ]


_thread_state = threading.local()


def _stage(lib: Any, plan: _Staged, out: Any, a: ShearArgs) -> tuple[Any, Any]:
    """This thread's zeroed stage for `plan`, flat and as the view of its windows
    (shaped like a block of ``x`` of ``plan.chunk`` channels)."""
    cax = a.channel_axis
    shape = list(a.array.shape)
    shape[:cax] = [1] * cax
    shape[cax] = plan.chunk
    # The copy out of the last block may run |step| rows past its windows.
    size = plan.chunk * plan.span + math.prod(out.shape[cax + 1 :])
    key = (out.dtype, size, tuple(shape), plan.span, plan.strides)
    cached = getattr(_thread_state, "stage", None)
    if cached is None or cached[0] != key:
        flat = lib.zeros(size, dtype=out.dtype)
        strides = [0] * cax + [plan.span] + list(plan.strides[cax + 1 :])
        windows = lib.lib.stride_tricks.as_strided(
            flat, tuple(shape), tuple(st * out.itemsize for st in strides)
        )
        cached = (key, flat, windows)
        _thread_state.stage = cached
    return cached[1], cached[2]


def _staged_work(
    lib: Any, out: Any, a: ShearArgs, step: int, base: int
) -> tuple[list[Any], Callable[[Iterable[Any]], None]]:
    """The blocks of channels (by number) and the work that writes them through a
    stage."""
    plan = _staged_plan(lib, out, a, step, base)
    x, offsets, _, ax, cax, mask = a[:6]
    shape, strides, channels = tuple(out.shape), plan.strides, x.shape[cax]
    inner = strides[ax]
    units = _staged_units(shape, cax, plan.chunk)
    # Where each block's copy out goes: from its first window to the next block's
    # first window (whose head is zeros too), or to the end of its last channel.
    places = []
    for unit in units:
        c0, c1 = unit[cax].start, unit[cax].stop
        start = sum(s.start * st for s, st in zip(unit[: cax + 1], strides, strict=False))
        begin = start + offsets[c0] * inner
        if c1 < channels:
            length = (c1 - c0) * plan.span
        else:
            length = (c1 - c0) * strides[cax] - offsets[c0] * inner
        head = start if c0 == 0 and plan.head else -1
        places.append((unit, begin, length, head))
    fused = mask is None and x.dtype == out.dtype and _tail_contiguous(x, ax)
    x_rows = _rows(lib, x, ax) if fused else None
    lead = tuple(slice(None) for _ in range(cax))

    def work(todo: Iterable[int]) -> None:
        flat, windows = _stage(lib, plan, out, a)
        w_rows = _rows(lib, windows, ax) if fused else None
        for i in todo:
            unit, begin, length, head = places[i]
            channels_here = (*lead, slice(0, unit[cax].stop - unit[cax].start))
            if x_rows is not None and w_rows is not None:
                lib.copyto(w_rows[channels_here], x_rows[unit[:ax]])
            else:
                m = None if mask is None else _sub(mask, unit)
                write_masked(lib, windows[channels_here], x[unit], m)
            if head >= 0:
                plan.flat[head : head + plan.head] = 0
            lib.copyto(plan.flat[begin : begin + length], flat[:length])

    return list(range(len(units))), work


def shear_into(lib: Any, out: Any, a: ShearArgs, run: Run = serial) -> None:
    """Fill the C-contiguous sheared cube `out` block by block."""
    x, offsets, fractions, ax, cax, mask = a[:6]
    if out.size == 0:
        return
    channels = x.shape[cax]
    lin = linear_step(offsets) if fractions is None else None
    if lin is not None and cax < ax and out.nbytes >= 4 * block_bytes():  # several blocks
        run(*_staged_work(lib, out, a, *lin))
        return
    groups = _groups(lib, out, x, mask, a)
    rows = None
    if (
        lin is not None
        and mask is None
        and len(groups) == 1
        and x.dtype == out.dtype
        and _tail_contiguous(x, ax)
        and _tail_contiguous(groups[0].windows, ax)
    ):
        rows = (_rows(lib, groups[0].windows, ax), _rows(lib, x, ax))

    def work(todo: Iterable[Unit]) -> None:
        for unit in todo:
            _fill_zero(lib, out[unit])
            if rows is not None:
                lib.copyto(rows[0][unit[:ax]], rows[1][unit[:ax]])
                continue
            for g in groups:
                part = _in_unit(unit, cax, g, channels)
                if part is None:
                    continue
                dst, xg = g.windows[part], g.array[part]
                mg = None if g.mask is None else _sub(g.mask, part)
                f = g.group.fraction
                if f == 0:
                    write_masked(lib, dst, xg, mg)
                    continue
                z = xg if mg is None else lib.multiply(xg, mg, dtype=out.dtype)
                lib.multiply(z, 1 - f, out=dst)
                later = g.later[part]
                lib.add(later, z * f, out=later)

    run(blocks(tuple(out.shape), ax, out.itemsize), work)


# ---------------------------------------------------------------- unshear


def unshear_into(lib: Any, out: Any, a: ShearArgs, run: Run = serial) -> None:
    """Fill the C-contiguous `out` (``x``'s shape) with every window of ``y`` times the
    conjugated mask, block by block."""
    y, offsets, fractions, ax, cax, mask = a[:6]
    if out.size == 0:
        return
    if mask is not None and lib.iscomplexobj(mask):
        mask = lib.conj(mask)
    channels = out.shape[cax]
    units = blocks(tuple(out.shape), ax, out.itemsize)
    groups = _groups(lib, y, out, mask, a)
    rows = None
    lin = linear_step(offsets) if fractions is None else None
    if lin is not None and mask is None and len(groups) == 1 and y.dtype == out.dtype:
        if _tail_contiguous(groups[0].windows, ax):
            rows = (_rows(lib, out, ax), _rows(lib, groups[0].windows, ax))

    def work(todo: Iterable[Unit]) -> None:
        for unit in todo:
            if rows is not None:
                lib.copyto(rows[0][unit[:ax]], rows[1][unit[:ax]])
                continue
            for g in groups:
                part = _in_unit(unit, cax, g, channels)
                if part is None:
                    continue
                dst, now = g.array[part], g.windows[part]
                mg = None if g.mask is None else _sub(g.mask, part)
                f = g.group.fraction
                if f == 0:
                    write_masked(lib, dst, now, mg)
                    continue
                lib.multiply(now, 1 - f, out=dst)
                lib.add(dst, g.later[part] * f, out=dst)
                if mg is not None:
                    lib.multiply(dst, mg, out=dst)

    run(units, work)


def shear(lib: Any, empty: Empty, a: ShearArgs, run: Run = serial) -> Any:
    """The sheared cube, from :func:`shear_into`."""
    out = empty(list(a.shape), a.dtype)
    shear_into(lib, out, a, run)
    return out


def unshear(lib: Any, empty: Empty, a: ShearArgs, run: Run = serial) -> Any:
    """``x``, from :func:`unshear_into`."""
    out = empty(list(a.shape), a.dtype)
    unshear_into(lib, out, a, run)
    return out
