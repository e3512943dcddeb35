"""NumPy shift_sum family: four forward strategies, two adjoint ones, over threads.

The forward operator is memory-bound, and a slice-add into a window of ``y`` is a
*strided* operation (rows of ``W`` elements at a stride of ``W + max(o)``) that NumPy
runs several times slower than a contiguous one. So the ``blocked`` strategy sums each
block of rows into a flat accumulator whose rows have x's length ``W``: channel ``c``
is one contiguous add at flat offset ``o_c``, and ``x`` is read once, in long runs.

Element ``(r, j)`` of ``y`` lands at flat position ``r * W + j``, which it shares
with ``(r - 1, j + W)``, ``(r + 1, j - W)``, ...: a channel's last ``o_c`` columns
wrap into the next row. Sharing elements get their channels from disjoint offset
ranges (``(j - W, j]`` for ``(r, j)``), and channels go in ascending offset, so once
all channels of offset ``<= o`` are in, the columns ``[o, next offset)`` of ``y`` are
complete: they are copied out and zeroed before the next channel wraps into them.
Nothing is ever subtracted, so the sums are as exact as a slice-add loop's.

The other strategies: ``strided`` for an x whose rows are strided (channels-last
data), blocked so that every channel's gather reads the block from the cache;
``sheared`` and ``loop`` for a small x (fits a core's L2) with few rows per channel,
which pay less set-up than blocks. The adjoint copies each channel's window of ``y``
(times the mask) into the result: ``windows`` for a small result, ``blocked`` (block by
block over threads) otherwise.

NumPy releases the GIL inside ufuncs, so portops' thread pool spreads blocks over the
cores, one thread per ``thread_grain`` bytes moved (see :func:`portops._threads.workers`).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import wait
from itertools import groupby
from typing import Any, NamedTuple

import numpy as np

from ... import _buffers as buffers
from ... import _machine, _threads, extend
from ..._generic import shift_sum as generic
from ..._kernels.geometry import linear_step
from ..._ops.shift_sum import ShiftSumArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority

__all__ = ["choose_forward", "forward_plan", "run_units", "strided_rows"]

_local = threading.local()
Run = Callable[[Any, Any], np.ndarray]
Unit = tuple[tuple[int, ...], slice]

# -------------------------------------------------------------------------- layouts


class Layout(NamedTuple):
    """Canonical views: channels first, then ``outer`` dims, the shifted axis, ``inner``.

    ``x`` is ``(C, *outer, W, *inner)`` and ``y`` is ``(*outer, W + grow, *inner)``.
    ``mask`` (or None) is ``(C or 1, *outer', W or 1, *inner')`` with size-1 dims.
    """

    x: np.ndarray
    mask: np.ndarray | None
    outer: tuple[int, ...]
    width: int
    grow: int
    inner: int


def _canonical_shape(shape: tuple[int, ...], cax: int, ax: int) -> tuple[int, ...]:
    moved = (shape[cax], *(n for d, n in enumerate(shape) if d != cax))
    k = ax - (ax > cax) + 1  # position of the shifted axis once channels come first
    return (*moved[: k + 1], math.prod(moved[k + 1 :]))


def _canonical(a: np.ndarray, cax: int, ax: int, *, view: bool = False) -> np.ndarray | None:
    """Move `cax` first and merge the dims after `ax` into one.

    A view when the strides allow it; otherwise a copy, or None when `view` is set
    (results are written through this, so a copy would lose the writes).
    """
    moved = np.moveaxis(a, cax, 0)
    shape = _canonical_shape(a.shape, cax, ax)
    try:
        return moved.reshape(shape, copy=False)
    except ValueError:
        return None if view else moved.reshape(shape)


def _read_view(a: np.ndarray, cax: int, ax: int) -> np.ndarray:
    v = _canonical(a, cax, ax)
    assert v is not None
    return v


def _layout(x: np.ndarray, a: ShiftSumArgs) -> Layout:
    cax, ax = a.channel_axis, a.axis
    xv = _read_view(x, cax, ax)
    mv = None if a.mask is None else _read_view(a.mask, cax, ax)
    if mv is not None and mv.shape[-1] not in (1, xv.shape[-1]):
        # inner dims broadcast in the mask: expand them before merging.
        full = list(a.mask.shape)
        for d in range(ax + 1, x.ndim):
            if d != cax:
                full[d] = x.shape[d]
        mv = _read_view(np.broadcast_to(a.mask, tuple(full)), cax, ax)
    outer = xv.shape[1:-2]
    return Layout(xv, mv, outer, xv.shape[-2], max(a.offsets), xv.shape[-1])


def _blocks(outer: tuple[int, ...], row_elements: int, target: int, workers: int) -> list[Unit]:
    """Work units of about `target` elements, given the elements per outer row.

    A unit is an index into the leading outer dims and a range of the next one; it
    covers every dim after that range. Ranges are of even length, and their count a
    multiple of `workers` where the dim allows, so the threads finish together.
    """
    if not outer:
        return [((), slice(None))]
    # Leading dims of length 1 (a batch of one) are indexed, never split.
    first = next((d for d, n in enumerate(outer) if n > 1), len(outer) - 1)
    split = len(outer) - 1
    while split > first and math.prod(outer[split:]) * row_elements <= target:
        split -= 1
    below = math.prod(outer[split + 1 :]) * row_elements
    last = outer[split]
    count = -(-last // max(1, target // max(1, below)))
    if split == first:
        count = min(last, -(-count // workers) * workers)
    step = -(-last // count)
    return [
        (prefix, slice(r, min(r + step, last)))
        for prefix in np.ndindex(*outer[:split])
        for r in range(0, last, step)
    ]


def _block_elements(fraction: float, itemsize: int) -> int:
    """Elements of a block filling `fraction` of one core's L2."""
    return max(1, int(fraction * _machine.current().l2) // itemsize)


def run_units(units: list[Any], work: Callable[[Iterable[Any]], None], workers: int) -> None:
    """Run `work` over `units` on this thread and up to `workers - 1` of the pool's.

    Each thread takes the next unit when it is free, so a core that is busy elsewhere
    (a noisy host, another library's threads) delays only its own units.
    """
    if workers <= 1 or len(units) == 1:
        work(units)
        return
    queue = iter(units)
    lock = threading.Lock()

    def take() -> Iterator[Any]:
        while True:
            with lock:
                unit = next(queue, None)
            if unit is None:
                return
            yield unit

    _threads.enter()
    try:
        count = min(workers, len(units)) - 1
        helpers = _threads.submit_helpers(lambda: work(take()), count, workers)
        try:
            work(take())
        finally:
            # A helper still queued behind another call's work has nothing left to do.
            started = [helper for helper in helpers if not helper.cancel()]
            wait(started)  # no helper may still write once this returns or raises
    finally:
        _threads.leave()
    for helper in started:
        helper.result()


def _workers(nbytes: int) -> int:
    return _threads.workers(nbytes, NUMPY["thread_grain"])


def _scratch(slot: str, size: int, dtype: np.dtype) -> np.ndarray:
    """A per-thread flat buffer of `size` elements, reused from call to call."""
    cached = getattr(_local, slot, None)
    if cached is None or cached.dtype != dtype or cached.size < size:
        cached = np.empty(size, dtype=dtype)
        setattr(_local, slot, cached)
    return cached[:size]


def _sub(a: np.ndarray, prefix: tuple[int, ...], rows: slice, lead: int) -> np.ndarray:
    """Block of `a` (laid out as ``(lead..., *outer, ...)``) for one work unit.

    Outer dims of size 1 in `a` (a broadcast mask) are indexed at 0 or kept whole.
    """
    idx: list[Any] = [slice(None)] * lead
    outer_dims = a.shape[lead : a.ndim - 2]
    for i, p in zip(prefix, outer_dims, strict=False):
        idx.append(0 if p == 1 else i)
    if len(outer_dims) > len(prefix):
        idx.append(slice(None) if outer_dims[len(prefix)] == 1 else rows)
    view: np.ndarray = a[tuple(idx)]
    return view


def _flat_if_contiguous(a: np.ndarray) -> np.ndarray:
    """`a` as one flat run when its elements are contiguous: the fastest ufunc loop."""
    return a.reshape(-1) if a.flags.c_contiguous else a


def _as_words(a: np.ndarray) -> np.ndarray:
    """`a` (rows of a few contiguous elements) with each row as one machine word.

    NumPy then loops over the rows in one inner loop instead of one per row; a copy
    of these views moves the same bytes.
    """
    nbytes = a.shape[-1] * a.itemsize
    # (A single element per row needs no view: NumPy already loops over rows only.)
    if a.shape[-1] > 1 and a.strides[-1] == a.itemsize and nbytes in (2, 4, 8):
        return a.view(f"u{nbytes}")
    return a


# -------------------------------------------------------------------------- the forward


def _forward_into(
    y: np.ndarray, lay: Layout, offsets: tuple[int, ...], acc: np.dtype, workers: int
) -> None:
    """Fill ``y`` (``(*outer, W + grow, inner)``, contiguous, dtype `acc`) from an x
    with contiguous rows, block by block."""
    xv, mv, outer, width, grow, inner = lay
    row, out_row = width * inner, (width + grow) * inner
    # Channels by flat offset, ascending (the smallest is 0).
    order = sorted(range(len(offsets)), key=lambda c: offsets[c])
    groups = [(o * inner, list(cs)) for o, cs in groupby(order, key=lambda c: offsets[c])]

    def work(units: Iterable[tuple[tuple[int, ...], slice]]) -> None:
        for prefix, rows in units:
            xu = _sub(xv, prefix, rows, 1)
            mu = None if mv is None else _sub(mv, prefix, rows, 1)
            yr = y[prefix][rows].reshape(-1, out_row)
            n = yr.shape[0] * row
            flat = _scratch("accumulator", n + grow * inner, acc)
            for i, (start, channels) in enumerate(groups):
                for c in channels:
                    if mu is None:
                        xc = _flat_if_contiguous(xu[c])
                    else:  # the channel times the mask into a contiguous scratch
                        xc = _scratch("channel", n, acc).reshape(xu.shape[1:])
                        m = mu[c if mu.shape[0] > 1 else 0]
                        np.multiply(xu[c], m, out=xc, casting="unsafe")
                        xc = xc.reshape(-1)
                    dst = flat[start : start + n].reshape(xc.shape)
                    if c == order[0]:  # the first channel initialises the block
                        np.copyto(dst, xc, casting="unsafe")
                        flat[n:] = 0
                    else:
                        np.add(dst, xc, out=dst, casting="unsafe")
                # Every output column in [start, stop) now holds all its channels.
                following = groups[i + 1][0] if i + 1 < len(groups) else None
                stop = start + row if following is None else min(following, start + row)
                done = flat[start : start + n].reshape(-1, row)[:, : stop - start]
                np.copyto(_as_words(yr[:, start:stop]), _as_words(done))
                if following is not None:
                    done.fill(0)  # the next channels wrap into these columns
                    yr[:, stop:following] = 0  # no channel reaches these (grow > W)

    target = _block_elements(NUMPY["forward_block_l2"], acc.itemsize)
    run_units(_blocks(outer, out_row, target, workers), work, workers)


def _strided_forward_into(
    y: np.ndarray, lay: Layout, offsets: tuple[int, ...], workers: int
) -> None:
    """Fill ``y`` from an x whose rows are strided (channels-last data, say).

    Every channel's add reads x at a stride, one element per cache line or so, at the
    same speed wherever it lands: so each channel is added straight into its window of
    ``y``'s block, one NumPy call per channel and block (a mask times the channel into
    a contiguous scratch first). Blocks fill ``block_fraction`` of a core's L2 or its
    share of the L3, whichever is larger: every channel reads them again from there,
    and each channel's NumPy call per block is repaid by as much work as that allows.
    """
    xv, mv, outer, width, _, inner = lay
    first = offsets.index(0)  # its copy initialises the block's first W columns
    channels = [first, *(c for c in range(len(offsets)) if c != first)]
    windows = [(..., slice(o, o + width), slice(None)) for o in offsets]

    def work(units: Iterable[tuple[tuple[int, ...], slice]]) -> None:
        for prefix, rows in units:
            xu = _sub(xv, prefix, rows, 1)
            mu = None if mv is None else _sub(mv, prefix, rows, 1)
            yb = y[prefix][rows]
            yb[..., width:, :] = 0
            for c in channels:
                xc = xu[c]
                if mu is not None:
                    z = _scratch("channel", xc.size, y.dtype).reshape(xc.shape)
                    np.multiply(xc, mu[c if mu.shape[0] > 1 else 0], out=z, casting="unsafe")
                    xc = z
                dst = yb[windows[c]]
                if c == first:
                    np.copyto(dst, xc, casting="unsafe")
                else:
                    np.add(dst, xc, out=dst, casting="unsafe")

    m = _machine.current()
    gather = max(m.l2, m.l3_per_core) * NUMPY["block_fraction"]
    target = max(1, int(gather) // xv.itemsize)
    units = _blocks(outer, len(offsets) * width * inner, target, workers)
    run_units(units, work, workers)


def _rows_contiguous(xv: np.ndarray) -> bool:
    """Whether each row ``xv[c, ..., :, :]`` (the last two dims) is one contiguous run."""
    width, inner = xv.shape[-2:]
    item = xv.itemsize
    return (inner == 1 or xv.strides[-1] == item) and (width == 1 or xv.strides[-2] == inner * item)


def _forward_bytes(a: ShiftSumArgs) -> int:
    """Bytes a forward call moves: x read, y written."""
    x = a.array
    return x.size * x.itemsize + math.prod(a.shape) * np.dtype(a.acc_dtype).itemsize


def _blocked_forward(a: ShiftSumArgs) -> np.ndarray:
    """The blocked (or strided) forward of normalised arguments."""
    x = np.asarray(a.array)
    out_dtype, acc = np.dtype(a.dtype), np.dtype(a.acc_dtype)
    lay = _layout(x, a)
    y = buffers.empty((*lay.outer, lay.width + lay.grow, lay.inner), acc)
    if y.size:
        if lay.x.size == 0:
            y[...] = 0
        elif _rows_contiguous(lay.x):
            _forward_into(y, lay, a.offsets, acc, _workers(_forward_bytes(a)))
        else:
            _strided_forward_into(y, lay, a.offsets, _workers(_forward_bytes(a)))
    # (*outer, W', inner) holds the elements in the order of x's layout without channels.
    return y.astype(out_dtype, copy=False).reshape(a.shape)


# ----------------------------------------------------------------------------- the adjoint


def _adjoint_into(
    out: np.ndarray, y: np.ndarray, lay: Layout, offsets: tuple[int, ...], conj: bool
) -> None:
    """``out[c] = conj?(mask_c) * window_c(y)`` block by block.

    ``out`` is laid out like ``lay.x`` (channels first), ``y`` like the forward's output;
    `out` must be writable in place (a view of the result, not a copy).
    """
    _, mv, outer, width, _, inner = lay
    mask = None if mv is None else (np.conj(mv) if conj else mv)

    def work(units: Iterable[tuple[tuple[int, ...], slice]]) -> None:
        for prefix, rows in units:
            yb = y[prefix][rows] if outer else y
            mb = None if mask is None else _sub(mask, prefix, rows, 1)
            ob = _sub(out, prefix, rows, 1)
            for c, o in enumerate(offsets):
                window = yb[..., o : o + width, :]
                if mb is None:
                    np.copyto(ob[c], window, casting="unsafe")
                else:
                    np.multiply(
                        window, mb[c if mb.shape[0] > 1 else 0], out=ob[c], casting="unsafe"
                    )

    workers = _workers(2 * out.size * out.itemsize)
    row = (width + lay.grow) * inner
    target = _block_elements(NUMPY["block_fraction"], out.itemsize)
    run_units(_blocks(outer, row, target, workers), work, workers)


def _canonical_y(y: np.ndarray, a: ShiftSumArgs) -> np.ndarray:
    """``y`` (channel axis of size 1) as ``(*outer, W', inner)``."""
    view: np.ndarray = _read_view(y, a.channel_axis, a.axis)[0]
    return view


def _blocked_adjoint(a: ShiftSumArgs) -> np.ndarray:
    """Each channel's window of ``y`` copied (times the mask) into the result, block by
    block over threads."""
    y = np.asarray(a.array)
    dtype = np.dtype(a.dtype)
    out = buffers.empty(a.shape, dtype)
    if out.size == 0:
        return out
    # Only the layout's shapes and mask view are used: read them from a stride-0 stand-in
    # for `out`, which reshapes as a view whatever the axes (out is not written yet).
    lay = _layout(np.broadcast_to(np.empty((), dtype=dtype), out.shape), a)
    conj = a.mask is not None and np.iscomplexobj(a.mask)
    view = _canonical(out, a.channel_axis, a.axis, view=True)
    if view is not None:
        _adjoint_into(view, _canonical_y(y, a), lay, a.offsets, conj)
        return out
    # Layouts whose trailing axes cannot merge in place: fill channels-first, copy back.
    buf = np.empty(_canonical_shape(out.shape, a.channel_axis, a.axis), dtype=dtype)
    _adjoint_into(buf, _canonical_y(y, a), lay, a.offsets, conj)
    moved = np.moveaxis(out, a.channel_axis, 0)
    np.copyto(moved, buf.reshape(moved.shape))
    return out


# ------------------------------------------------------------------------------- plans
# A plan takes the call's (array, mask) as passed to the public function, or as
# normalised (a first call): the normalisation is idempotent. It keeps no array.


def _mask_normalizer(a: ShiftSumArgs) -> Callable[[Any], Any]:
    """Raw mask -> the normalised one (x's number of dims, bool cast) `a` was made from."""
    mask = a.mask
    if mask is None:
        return lambda m: m
    shape, dtype = mask.shape, mask.dtype

    def normalize(m: Any) -> Any:
        if m.dtype != dtype:
            m = m.astype(dtype)
        return m if m.shape == shape else m.reshape(shape)

    return normalize


def _normalizer(a: ShiftSumArgs) -> Callable[[Any, Any], tuple[np.ndarray, Any]]:
    """Raw (array, mask) -> the normalised pair `a` was made from: the mask as
    :func:`_mask_normalizer` makes it, and a ``y`` given without its channel axis
    (the adjoint's) with it inserted."""
    ndim, cax = len(a.shape), a.channel_axis
    normalize_mask = _mask_normalizer(a)

    def normalize(arr: Any, mask: Any) -> tuple[np.ndarray, Any]:
        if arr.ndim < ndim:
            arr = np.expand_dims(arr, cax)
        return arr, None if mask is None else normalize_mask(mask)

    return normalize


def _record_plan(kernel: Callable[[ShiftSumArgs], np.ndarray], a: ShiftSumArgs) -> Run:
    """`kernel` (of normalised arguments) as a plan."""
    normalize = _normalizer(a)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def run(arr: Any, mask: Any) -> np.ndarray:
        arr, mask = normalize(arr, mask)
        return kernel(template._replace(array=arr, mask=mask))

    return run


# ----------------------------------------------------------------- the sheared sum
# For small x with few rows per channel. Each channel's rows are written once, with
# one NumPy call for all channels (times the mask on the way), into a per-thread buffer
# laid out like y, one copy per channel: rows of W + grow elements whose last grow are
# zeros that are never written. Channel c's copy, moved back by o_c, is then a
# contiguous run of y's length whose elements line up with y's (the zeros fill in where
# the channel has nothing), so y is the sum of C contiguous runs: a single
# ``np.add.reduce`` over a strided view when the offsets are evenly spaced. That is two
# NumPy calls where the slice-add loop makes one per channel, each restarting NumPy's
# inner loop on every row of its strided window. Channels are summed in the loop's
# order, so the sums are the loop's (the padding adds exact zeros).
#
# Each thread keeps its buffers (at most _SHEARED_KEPT of at most _SHEARED_KEPT_BYTES;
# one holds x's elements with rows padded by grow <= 2W): their zeros are written
# once, not on every call.

# Each thread keeps its buffers for at most two geometries (the most recently used):
# their zeros are written once, not on every call. They serve an x that fits a core's
# L2, so they stay small.
_SHEARED_KEPT = 2


class _Sheared(NamedTuple):
    """One thread's buffer of the sheared sum for one geometry, with its views."""

    windows: np.ndarray  # (C, *outer, W, inner): where x's rows go
    rows: np.ndarray  # the same as (C, rows, W * inner)
    total: np.ndarray | None  # (C, n): sums to y over axis 0 (evenly spaced offsets)
    runs: list[np.ndarray]  # channel c's run of n elements (any offsets)


def _canonical_views(
    a: ShiftSumArgs,
) -> tuple[tuple[int, ...], tuple[int, ...], Callable[[Any], np.ndarray]]:
    """(perm, shape, canonical_mask) for `a`'s geometry: ``x.transpose(perm).reshape(shape)``
    is x's canonical view (:class:`Layout`), ``canonical_mask(raw mask)`` the mask's.

    Precomputed for plans: np.moveaxis costs more than the rest of a small call. A mask
    broadcast over some of the merged inner dims is first expanded over all of them.
    """
    x, cax, ax = a.array, a.channel_axis, a.axis
    normalize = _mask_normalizer(a)
    perm = (cax, *(d for d in range(x.ndim) if d != cax))
    x_shape = _canonical_shape(x.shape, cax, ax)
    m_full: tuple[int, ...] | None = None
    m_shape: tuple[int, ...] = ()
    if a.mask is not None:
        m_full = tuple(x.shape[d] if d > ax and d != cax else n for d, n in enumerate(a.mask.shape))
        m_shape = _canonical_shape(a.mask.shape, cax, ax)
        if m_shape[-1] in (1, x_shape[-1]):
            m_full = None
        else:
            m_shape = _canonical_shape(m_full, cax, ax)

    def canonical_mask(mask: Any) -> np.ndarray:
        m = normalize(mask)
        if m_full is not None:
            m = np.broadcast_to(m, m_full)
        mv: np.ndarray = m.transpose(perm).reshape(m_shape)
        return mv

    return perm, x_shape, canonical_mask


def _strided_forward_plan(a: ShiftSumArgs) -> Run:
    """The strided forward with its views precomputed (a call's set-up otherwise costs
    tens of microseconds beside the work)."""
    x, offsets = a.array, a.offsets
    perm, x_shape, canonical_mask = _canonical_views(a)
    _, *outer_list, width, inner = x_shape
    outer, grow = tuple(outer_list), max(offsets)
    y_shape = (*outer, width + grow, inner)
    acc, out_dtype, final = np.dtype(a.acc_dtype), np.dtype(a.dtype), a.shape
    moved = _forward_bytes(a)

    def run(x: Any, mask: Any) -> np.ndarray:
        xv = x.transpose(perm).reshape(x_shape)
        mv = None if mask is None else canonical_mask(mask)
        y = buffers.empty(y_shape, acc)
        lay = Layout(xv, mv, outer, width, grow, inner)
        _strided_forward_into(y, lay, offsets, _workers(moved))
        return y.astype(out_dtype, copy=False).reshape(final)

    del x
    return run


def _sheared_forward_plan(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray]:
    """The sheared sum of `a`'s geometry: precomputed shapes, a buffer per thread."""
    x, cax, ax, offsets = a.array, a.channel_axis, a.axis, a.offsets
    channels, width, grow = x.shape[cax], x.shape[ax], max(offsets)
    outer = tuple(n for d, n in enumerate(x.shape[:ax]) if d != cax)
    inner = math.prod(n for d, n in enumerate(x.shape) if d > ax and d != cax)
    rows = math.prod(outer)
    n = rows * (width + grow) * inner  # elements of y, and of each channel's copy
    head = grow * inner  # zeros before channel 0's copy, read by offsets above 0
    acc, out_dtype = np.dtype(a.acc_dtype), np.dtype(a.dtype)
    lin = linear_step(offsets)
    key = (acc, channels, outer, width, inner, offsets)
    final = a.shape
    normalize = _mask_normalizer(a)
    perm, x_shape, canonical_mask = _canonical_views(a)

    def make() -> _Sheared:
        buf = np.zeros(head + channels * n, dtype=acc)
        copies = buf[head:].reshape(channels, rows, (width + grow) * inner)
        rows_view = copies[:, :, : width * inner]
        windows = rows_view.reshape(channels, *outer, width, inner)
        total = None
        if lin is not None:
            step, base = lin
            start = buf[head - base * inner :]
            strides = ((n - step * inner) * acc.itemsize, acc.itemsize)
            total = np.lib.stride_tricks.as_strided(start, (channels, n), strides)
        runs = [buf[head + c * n - o * inner :][:n] for c, o in enumerate(offsets)]
        return _Sheared(windows, rows_view, total, runs)

    def sheared() -> _Sheared:
        kept: OrderedDict[Any, _Sheared] | None = getattr(_local, "sheared", None)
        if kept is None:
            kept = _local.sheared = OrderedDict()
        found = kept.get(key)
        if found is None:
            found = kept[key] = make()
            while len(kept) > _SHEARED_KEPT:
                kept.popitem(last=False)
        kept.move_to_end(key)
        return found

    def run(x: Any, mask: Any) -> np.ndarray:
        xv = x.transpose(perm).reshape(x_shape)
        sh = sheared()
        if _rows_contiguous(xv):
            if mask is None:
                np.copyto(sh.windows, xv, casting="unsafe")
            else:
                np.multiply(xv, canonical_mask(mask), out=sh.windows, casting="unsafe")
        else:
            if mask is not None:  # in x's own layout first: a contiguous multiply
                z = _scratch("masked", x.size, acc).reshape(x.shape)
                np.multiply(x, normalize(mask), out=z, casting="unsafe")
                xv = z.transpose(perm).reshape(x_shape)
            _transpose_rows(sh.rows, xv.reshape(channels, rows, width * inner))
        y = np.empty(n, dtype=acc)
        if sh.total is not None:
            np.add.reduce(sh.total, axis=0, out=y)
        else:
            np.copyto(y, sh.runs[0])
            for r in sh.runs[1:]:
                np.add(y, r, out=y)
        return y.astype(out_dtype, copy=False).reshape(final)

    return run


def _transpose_rows(out: np.ndarray, src: np.ndarray) -> None:
    """``out[...] = src`` for ``(C, rows, k)`` arrays whose `src` rows are strided
    (channels last), a few rows at a time: NumPy's strided copy reads each channel
    through the whole source, which then must stay in the L1 cache."""
    per_row = src.shape[0] * src.shape[2] * src.itemsize
    chunk = int(NUMPY["block_fraction"] * _machine.current().l1)
    step = max(1, chunk // max(1, per_row))
    for r in range(0, src.shape[1], step):
        np.copyto(out[:, r : r + step], src[:, r : r + step], casting="unsafe")


def _small_forward_plan(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray]:
    """Slice-add loop, channel axis kept (size 1): least overhead for small arrays."""
    x, cax, ax = a.array, a.channel_axis, a.axis
    out_dtype, acc = np.dtype(a.dtype), np.dtype(a.acc_dtype)
    shape = list(x.shape)
    width = shape[ax]
    shape[ax] += max(a.offsets)
    shape[cax] = 1
    final = a.shape
    steps = []
    for c, o in enumerate(a.offsets):
        src: list[Any] = [slice(None)] * x.ndim
        dst: list[Any] = [slice(None)] * x.ndim
        src[cax] = slice(c, c + 1)
        dst[ax] = slice(o, o + width)
        steps.append((tuple(src), tuple(dst)))
    normalize = _mask_normalizer(a)
    cast = acc != out_dtype
    product = np.dtype(a.dtype)

    def run(x: Any, mask: Any) -> np.ndarray:
        y = np.zeros(shape, dtype=acc)
        if mask is not None:
            # The mask multiplied into all channels in one call (one contiguous loop, not
            # one per channel), into a reused buffer: no page faults for a fresh temporary.
            z = _scratch("masked", x.size, product).reshape(x.shape)
            np.multiply(x, normalize(mask), out=z)
            x = z
        for src, dst in steps:
            y[dst] += x[src]
        if cast:
            y = y.astype(out_dtype)
        return y.reshape(final)

    return run


def _small_adjoint_plan(a: ShiftSumArgs) -> Run:
    """The adjoint as one window copy (or multiply) per channel into a new result,
    every index precomputed: least overhead for a small result."""
    mask, cax, ax = a.mask, a.channel_axis, a.axis
    dtype = np.dtype(a.dtype)
    shape = list(a.shape)
    width = shape[ax]
    ndim = len(shape)
    steps = []
    for c, o in enumerate(a.offsets):
        dst: list[Any] = [slice(None)] * len(shape)
        src: list[Any] = [slice(None)] * len(shape)
        dst[cax] = slice(c, c + 1)
        src[ax] = slice(o, o + width)
        msrc = None if mask is None else (tuple(dst) if mask.shape[cax] > 1 else ())
        steps.append((tuple(dst), tuple(src), msrc))
    normalize = _mask_normalizer(a)
    conj = mask is not None and np.iscomplexobj(mask)

    def run(y: Any, mask: Any) -> np.ndarray:
        if y.ndim < ndim:
            y = np.expand_dims(y, cax)
        out = buffers.empty(shape, dtype)
        if mask is None:
            for dst, src, _ in steps:
                out[dst] = y[src]
        else:
            m = normalize(mask)
            if conj:
                m = np.conj(m)
            for dst, src, msrc in steps:
                np.multiply(y[src], m[msrc], out=out[dst])
        return out

    return run


# ------------------------------------------------------------------------- the rules


def strided_rows(a: ShiftSumArgs) -> bool:
    """Whether the rows of the forward's x are strided (channels-last data, say)."""
    perm, x_shape, _ = _canonical_views(a)
    xv = a.array.transpose(perm).reshape(x_shape)  # (a copy, were it one, is contiguous)
    return bool(a.array.size) and not _rows_contiguous(xv)


def choose_forward(a: ShiftSumArgs) -> tuple[str, str]:
    """(strategy, rule) of a forward call."""
    x, cax, ax = a.array, a.channel_axis, a.axis
    rows = math.prod(n for d, n in enumerate(x.shape[:ax]) if d != cax)
    if x.size * x.itemsize <= _machine.current().l2 and rows < NUMPY["loop_rows"]:
        limit = NUMPY["sheared_growth"] * x.shape[ax] * (2 if cax > ax else 1)
        if x.size and max(a.offsets) <= limit:
            return "sheared", (
                f"x fits one core's L2 with fewer than {NUMPY['loop_rows']} rows per "
                "channel: two NumPy calls in all"
            )
        return "loop", "x fits one core's L2, with long padding: a slice-add per channel"
    if strided_rows(a):
        return "strided", "x's rows are strided: each channel gathered from cache-sized blocks"
    return "blocked", "contiguous adds into a flat accumulator, block by block"


def choose_adjoint(a: ShiftSumArgs) -> tuple[str, str]:
    """(strategy, rule) of an adjoint call."""
    nbytes = math.prod(a.shape) * np.dtype(a.dtype).itemsize
    if nbytes <= NUMPY["small_adjoint_l2"] * _machine.current().l2:
        return "windows", (f"the result fits {NUMPY['small_adjoint_l2']} L2s: one copy per channel")
    return "blocked", "window copies block by block, over threads"


def forward_plan(a: ShiftSumArgs, name: str) -> Run:
    """The plan of forward strategy `name` for `a`'s signature."""
    if name == "sheared":
        return _sheared_forward_plan(a)
    if name == "loop":
        return _small_forward_plan(a)
    if name == "strided" and strided_rows(a):
        return _strided_forward_plan(a)
    return _record_plan(_blocked_forward, a)


def _forward_threads(a: ShiftSumArgs) -> int:
    return _workers(_forward_bytes(a))


def _adjoint_threads(a: ShiftSumArgs) -> int:
    return _workers(2 * math.prod(a.shape) * np.dtype(a.dtype).itemsize)


def _pinv(a: ShiftSumArgs) -> np.ndarray:
    """``A^H (y / Phi)``, with ``Phi`` from the forward's strategies."""

    def forward(b: ShiftSumArgs) -> np.ndarray:
        return forward_plan(b, choose_forward(b)[0])(b.array, b.mask)

    def adjoint(b: ShiftSumArgs) -> np.ndarray:
        if choose_adjoint(b)[0] == "windows":
            return _small_adjoint_plan(b)(b.array, b.mask)
        return _blocked_adjoint(b)

    x: np.ndarray = generic.pinv(a, forward, adjoint)
    return x


def _named(name: str, summary: str, plan: Callable[[ShiftSumArgs], Run], threads: Any) -> Strategy:
    return Strategy(name, summary, plan, threads=threads)


FORWARD = Strategies(
    [
        _named(
            "blocked",
            "contiguous adds into a flat accumulator, block by block over threads",
            lambda a: forward_plan(a, "blocked"),
            _forward_threads,
        ),
        _named(
            "strided",
            "x with strided rows: each channel gathered from cache-sized blocks",
            lambda a: forward_plan(a, "strided"),
            _forward_threads,
        ),
        _named(
            "sheared",
            "small x: its channels' rows written once, then one sum (two NumPy calls)",
            _sheared_forward_plan,
            lambda a: 1,
        ),
        _named("loop", "small x: one slice-add per channel", _small_forward_plan, lambda a: 1),
    ],
    choose=choose_forward,
)
ADJOINT = Strategies(
    [
        _named(
            "blocked",
            "each channel's window copied block by block over threads, mask fused",
            lambda a: _record_plan(_blocked_adjoint, a),
            _adjoint_threads,
        ),
        _named(
            "windows",
            "small result: one copy (or multiply) per channel",
            _small_adjoint_plan,
            lambda a: 1,
        ),
    ],
    choose=choose_adjoint,
)
PINV = Strategies(
    [
        _named(
            "composed",
            "Phi by the forward's strategy, then the adjoint's of y / Phi",
            lambda a: _record_plan(_pinv, a),
            _adjoint_threads,
        )
    ],
    choose=lambda a: ("composed", "exact because A A^H is diagonal"),
)


def add_at(a: ShiftSumArgs) -> np.ndarray:
    """``np.add.at`` scatter of every element to its shifted position (alternative)."""
    x = np.asarray(a.array)
    dtype = np.dtype(a.dtype)
    z = x if a.mask is None else x * a.mask
    zc = np.moveaxis(z.astype(a.acc_dtype, copy=False), a.channel_axis, 0)
    k = a.axis - (a.axis > a.channel_axis)
    y_shape = list(zc.shape[1:])
    y_shape[k] += max(a.offsets)
    y = np.zeros(y_shape, dtype=zc.dtype)
    cols = np.arange(zc.shape[k + 1])
    for c, o in enumerate(a.offsets):
        idx: list[Any] = [slice(None)] * len(y_shape)
        idx[k] = cols + o
        np.add.at(y, tuple(idx), zc[c])
    y = np.expand_dims(y, a.channel_axis) if a.keepdims else y
    return y.astype(dtype, copy=False)


extend.register(
    "shift_sum",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-blocked contiguous adds over threads, mask fused per block",
    strategies=FORWARD,
)
extend.register(
    "shift_sum",
    "numpy_add_at",
    libraries=["numpy"],
    priority=Priority.BASELINE,
    summary="np.add.at scatter (alternative, for comparison)",
)(add_at)
extend.register(
    "shift_sum_adjoint",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="windows copied block by block over threads, mask fused",
    strategies=ADJOINT,
)
extend.register(
    "shift_sum_pinv",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="blocked forward for Phi, then the blocked adjoint of y / Phi",
    strategies=PINV,
)
