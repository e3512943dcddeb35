"""NumPy shift_sum family: blocked, spread over threads, masks fused per channel.

The forward operator is memory-bound, and a slice-add into a window of ``y`` is a
*strided* operation (rows of ``W`` elements at a stride of ``W + max(o)``) that NumPy
runs several times slower than a contiguous one. So each block of rows is summed
into a flat accumulator whose rows have x's length ``W``: channel ``c`` is one
contiguous add at flat offset ``o_c``, and ``x`` is read once, in long runs.

Element ``(r, j)`` of ``y`` lands at flat position ``r * W + j``, which it shares
with ``(r - 1, j + W)``, ``(r + 1, j - W)``, ...: a channel's last ``o_c`` columns
wrap into the next row. Sharing elements get their channels from disjoint offset
ranges (``(j - W, j]`` for ``(r, j)``), and channels go in ascending offset, so once
all channels of offset ``<= o`` are in, the columns ``[o, next offset)`` of ``y`` are
complete: they are copied out and zeroed before the next channel wraps into them.
Nothing is ever subtracted, so the sums are as exact as a slice-add loop's.

NumPy releases the GIL inside ufuncs, so a thread pool spreads blocks over the cores;
blocks are large because every NumPy call hands the GIL over twice. Small arrays with
few rows per channel skip all this for the sheared sum (two NumPy calls in all, see
below) or a plain slice-add loop (window copies for the adjoint).
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
from ... import _threads, extend
from ..._caches import cache_bytes, l2_bytes, l3_share_bytes
from ..._generic import shift_sum as generic
from ..._kernels.geometry import linear_step
from ..._ops.shift_sum import ShiftSumArgs
from ...extend import Priority

# Elements of output per block of the adjoint: fits a 1-2 MiB L2.
_BLOCK_ELEMENTS = 1 << 17
# ... and of the forward: larger, as each block pays a copy-out per distinct offset.
_FORWARD_BLOCK = 1 << 20


# Sizes (elements of x) where the approach changes, derived from the cache and core
# count this machine reports (the factors measured on a 2-core virtual machine with
# 2 MiB of L2 per core, where they come to 1, 8, 4 and 4 Mi elements):
# - below _SMALL_*, a plain slice-add (window-copy) loop costs less than setting up
#   blocks: its strided adds stay fast while x fits in the cores' L2 (the adjoint's
#   window copies, four times that); the forward's, as long as each channel has few
#   rows (see _LOOP_ROWS);
# - below _THREADED_*, the threads' GIL hand-overs (two per NumPy call, microseconds
#   each) cost more than they save: each thread needs about 4 Mi elements (forward)
#   or 2 Mi (adjoint) of work.
_CORES = _threads.available_cores()
_L2_ELEMENTS = l2_bytes() * _CORES // 4  # float32 elements that fit the cores' L2
_SMALL_FORWARD = _L2_ELEMENTS
_SMALL_ADJOINT = 4 * _L2_ELEMENTS
_THREADED_FORWARD = max(_SMALL_FORWARD, (1 << 22) * _CORES)
_THREADED_ADJOINT = max(_SMALL_ADJOINT, (1 << 21) * _CORES)
# Rows per channel (the product of the dims before the shifted one, channels aside)
# from which the blocked forward beats the sheared sum (and the slice-add loop) on a
# small x: those restart NumPy's inner loop on every row of every channel, the blocked
# kernel adds each channel in one contiguous run but makes about three more NumPy calls
# per channel (the copy-out and zeroing of its finished columns), and a NumPy call
# costs about as much as some tens of inner-loop restarts. Not a matter of cache
# sizes: both sides are interpreter and iterator overhead, which scale together from
# machine to machine.
_LOOP_ROWS = 128
# The sheared sum adds padded rows of W + grow elements per channel where the loop adds
# W: past this many times W of padding (twice the elements added), it loses. Twice
# that with the channel axis after the shifted one (channels last): there the loop
# gathers each channel at a stride through all of x, which costs more than the
# sheared sum's one transpose in L1-sized chunks and its longer contiguous adds.
_SHEARED_GROWTH = 1
# Bytes of x per forward block when its rows are strided (channels-last data, say):
# every channel reads the block again, so it should stay in the cache; but each
# channel costs a NumPy call per block, about as much as a few thousand strided
# element adds, so blocks are as large as that allows: a quarter of a core's share of
# the L3 (the rest holds y's rows and the other threads' blocks), or half its L2 where
# there is no L3. On a 2-core AMD EPYC (1 MiB L2, 32 MiB L3), B=1, C=28, 256x256
# channels last: 4 MiB blocks 1.9 ms, 1 MiB 3.8 ms, whole halves of x (16 MiB, one
# per thread) 15 ms at B=16, C=8.
_GATHER_BYTES = max(l2_bytes() // 2, l3_share_bytes() // 4)
# Elements of x from which the strided forward is spread over the threads: its adds
# cost several times a contiguous add per element, so threads repay their hand-overs
# from a smaller x than the contiguous forward's, from about twice the cores' L2 (the
# AMD EPYC above: B=1, C=28, 256x256, 1.8 Mi elements, 2.0 ms on two threads against
# 3.0 ms on one; C=8, 512 Ki elements, 0.53 ms against 0.45 ms).
_THREADED_STRIDED = 2 * _L2_ELEMENTS
# Bytes of x per chunk when the sheared sum transposes strided rows (channels last):
# each channel reads the chunk at a stride, so it must stay in one core's L1 (half).
_TRANSPOSE_BYTES = cache_bytes(1, 32 << 10) // 2

_local = threading.local()
worker_count = _threads.effective_threads


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


def _blocks(
    outer: tuple[int, ...],
    row_elements: int,
    target: int = _BLOCK_ELEMENTS,
    workers: int | None = None,
) -> list[tuple[tuple[int, ...], slice]]:
    """Work units of about `target` elements, given the elements per outer row.

    A unit is an index into the leading outer dims and a range of the next one; it
    covers every dim after that range. Ranges are of even length, and their count a
    multiple of `workers` (default: the worker count) where the dim allows, so the
    threads finish together.
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
        workers = worker_count() if workers is None else workers
        count = min(last, -(-count // workers) * workers)
    step = -(-last // count)
    return [
        (prefix, slice(r, min(r + step, last)))
        for prefix in np.ndindex(*outer[:split])
        for r in range(0, last, step)
    ]


def _run(units: list[Any], work: Callable[[Iterable[Any]], None], threaded: bool) -> None:
    """Run `work` over `units`, spread over this thread and the pool if `threaded`.

    Each thread takes the next unit when it is free, so a core that is busy elsewhere
    (a noisy host, another library's threads) delays only its own units.
    """
    n = worker_count()
    if not threaded or n == 1 or len(units) == 1:
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
        helpers = _threads.submit_helpers(lambda: work(take()), min(n, len(units)) - 1, n)
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


def _forward_into(y: np.ndarray, lay: Layout, offsets: tuple[int, ...], acc: np.dtype) -> None:
    """Fill ``y`` (``(*outer, W + grow, inner)``, contiguous, dtype `acc`)."""
    if not _rows_contiguous(lay.x):
        _strided_forward_into(y, lay, offsets)
        return
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

    threaded = xv.size >= _THREADED_FORWARD
    _run(_blocks(outer, out_row, _FORWARD_BLOCK, None if threaded else 1), work, threaded)


def _strided_units(
    outer: tuple[int, ...], row_elements: int, size: int, itemsize: int
) -> tuple[list[tuple[tuple[int, ...], slice]], bool]:
    """(units, threaded) of the strided forward (see _strided_forward_into)."""
    threaded = size >= _THREADED_STRIDED
    target = max(1, _GATHER_BYTES // itemsize)
    return _blocks(outer, row_elements, target, None if threaded else 1), threaded


def _strided_forward_into(
    y: np.ndarray,
    lay: Layout,
    offsets: tuple[int, ...],
    units: list[tuple[tuple[int, ...], slice]] | None = None,
    threaded: bool = False,
) -> None:
    """Fill ``y`` from an x whose rows are strided (channels-last data, say).

    Every channel's add reads x at a stride, one element per cache line or so, at the
    same speed wherever it lands: so each channel is added straight into its window of
    ``y``'s block, one NumPy call per channel and block (a mask times the channel into
    a contiguous scratch first). Blocks are as large as a core's share of the cache
    keeps while every channel reads them again (_GATHER_BYTES), and the threads share
    them from the size where one NumPy call's work outweighs its hand-over. `units`
    and `threaded` are :func:`_strided_units`' (a plan's, precomputed), else derived.
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

    if units is None:
        units, threaded = _strided_units(outer, len(offsets) * width * inner, xv.size, xv.itemsize)
    _run(units, work, threaded)


def _rows_contiguous(xv: np.ndarray) -> bool:
    """Whether each row ``xv[c, ..., :, :]`` (the last two dims) is one contiguous run."""
    width, inner = xv.shape[-2:]
    item = xv.itemsize
    return (inner == 1 or xv.strides[-1] == item) and (width == 1 or xv.strides[-2] == inner * item)


def _forward_kind(shape: tuple[int, ...], cax: int, ax: int, grow: int) -> str:
    """Which forward kernel an x of `shape` takes: ``"blocked"``, ``"sheared"`` (small
    x with few rows per channel) or ``"loop"`` (the same, where the sheared sum's padded
    rows would be too long, or x is empty)."""
    size = math.prod(shape)
    if size > _SMALL_FORWARD:
        return "blocked"
    rows = math.prod(n for d, n in enumerate(shape[:ax]) if d != cax)
    if rows >= _LOOP_ROWS:
        return "blocked"
    limit = _SHEARED_GROWTH * shape[ax] * (2 if cax > ax else 1)
    return "sheared" if size and grow <= limit else "loop"


def _small_plan(a: ShiftSumArgs, kind: str) -> Callable[[Any, Any], np.ndarray]:
    return _sheared_forward_plan(a) if kind == "sheared" else _small_forward_plan(a)


def forward(a: ShiftSumArgs) -> np.ndarray:
    """Shift-and-sum: the sheared sum or a slice-add loop for small arrays, else the
    blocked kernel."""
    x = np.asarray(a.array)
    out_dtype, acc = np.dtype(a.dtype), np.dtype(a.acc_dtype)
    kind = _forward_kind(x.shape, a.channel_axis, a.axis, max(a.offsets))
    if kind != "blocked":
        return _small_plan(a._replace(array=x), kind)(x, a.mask)
    lay = _layout(x, a)
    y = buffers.empty((*lay.outer, lay.width + lay.grow, lay.inner), acc)
    if y.size:
        if lay.x.size:
            _forward_into(y, lay, a.offsets, acc)
        else:
            y[...] = 0
    # (*outer, W', inner) holds the elements in the order of x's layout without channels.
    return y.astype(out_dtype, copy=False).reshape(a.shape)


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

    threaded = out.size >= _THREADED_ADJOINT
    units = _blocks(outer, (width + lay.grow) * inner, workers=None if threaded else 1)
    _run(units, work, threaded)


def _canonical_y(y: np.ndarray, a: ShiftSumArgs) -> np.ndarray:
    """``y`` (channel axis of size 1) as ``(*outer, W', inner)``."""
    view: np.ndarray = _read_view(y, a.channel_axis, a.axis)[0]
    return view


def _adjoint_small(out: np.ndarray, y: np.ndarray, a: ShiftSumArgs) -> np.ndarray:
    """Window copies on the channels-first views: least overhead for tiny arrays."""
    ov = np.moveaxis(out, a.channel_axis, 0)
    yv = np.moveaxis(y, a.channel_axis, 0)[0]
    mv = None if a.mask is None else np.moveaxis(a.mask, a.channel_axis, 0)
    if mv is not None and np.iscomplexobj(mv):
        mv = np.conj(mv)
    k = a.axis - (a.axis > a.channel_axis)
    width = ov.shape[k + 1]
    lead = (slice(None),) * k
    for c, o in enumerate(a.offsets):
        window = yv[(*lead, slice(o, o + width))]
        if mv is None:
            ov[c] = window
        else:
            np.multiply(window, mv[c if mv.shape[0] > 1 else 0], out=ov[c])
    return out


def adjoint(a: ShiftSumArgs) -> np.ndarray:
    """Each channel's window of ``y`` copied (times the mask) straight into the result."""
    y = np.asarray(a.array)
    dtype = np.dtype(a.dtype)
    out = buffers.empty(a.shape, dtype)
    if out.size == 0:
        return out
    if out.size <= _SMALL_ADJOINT:
        return _adjoint_small(out, y, a)
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


def pinv(a: ShiftSumArgs) -> np.ndarray:
    """``A^H (y / Phi)``, with ``Phi`` from the same blocked forward."""
    x: np.ndarray = generic.pinv(a, forward, adjoint)
    return x


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


# ----------------------------------------------------------------------------- plans
# A plan fixes, per call signature, what the kernels above decide per call: small
# arrays get their slice-add loop (or window copies) with every index precomputed;
# large ones the blocked kernels, whose per-call setup is small beside their work.


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

# Buffers kept per thread (one per geometry, the most recently used), and the largest
# kept (bytes): a few times the cores' L2, which the small x it serves fit in.
_SHEARED_KEPT = 2
_SHEARED_KEPT_BYTES = 4 * l2_bytes() * _CORES


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


def _strided_forward_plan(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray]:
    """The blocked forward of an x with strided rows, its views and blocks precomputed
    (a call's setup otherwise costs tens of microseconds beside the work)."""
    x, offsets = a.array, a.offsets
    perm, x_shape, canonical_mask = _canonical_views(a)
    channels, *outer_list, width, inner = x_shape
    outer, grow = tuple(outer_list), max(offsets)
    y_shape = (*outer, width + grow, inner)
    acc, out_dtype, final = np.dtype(a.acc_dtype), np.dtype(a.dtype), a.shape
    units, threaded = _strided_units(outer, channels * width * inner, x.size, x.itemsize)

    def run(x: Any, mask: Any) -> np.ndarray:
        xv = x.transpose(perm).reshape(x_shape)
        mv = None if mask is None else canonical_mask(mask)
        y = buffers.empty(y_shape, acc)
        lay = Layout(xv, mv, outer, width, grow, inner)
        _strided_forward_into(y, lay, offsets, units, threaded)
        return y.astype(out_dtype, copy=False).reshape(final)

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
        if (head + channels * n) * acc.itemsize > _SHEARED_KEPT_BYTES:
            return make()  # (wide dtypes) zeroed afresh rather than kept
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
    step = max(1, _TRANSPOSE_BYTES // max(1, per_row))
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


def _small_adjoint_plan(a: ShiftSumArgs, raw: bool) -> Callable[[Any, Any], np.ndarray]:
    y, mask, cax, ax = a.array, a.mask, a.channel_axis, a.axis
    dtype = np.dtype(a.dtype)
    shape = list(a.shape)
    width = shape[ax]
    expand = raw and not a.keepdims
    y_shape = tuple(y.shape)
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
        if expand:
            y = y.reshape(y_shape)
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


def _general_plan(
    kernel: Callable[[ShiftSumArgs], np.ndarray], a: ShiftSumArgs, expand: bool
) -> Callable[[Any, Any], np.ndarray]:
    normalize = _mask_normalizer(a)
    y_shape = tuple(a.array.shape)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def run(arr: Any, mask: Any) -> np.ndarray:
        if expand:
            arr = arr.reshape(y_shape)
        m = None if mask is None else normalize(mask)
        return kernel(template._replace(array=arr, mask=m))

    return run


def _plain(arr: Any) -> bool:
    return type(arr) is np.ndarray


def plan_forward(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray] | None:
    """Plan of a forward call: the sheared sum or the slice-add loop with their views
    and indices precomputed, or the blocked kernel."""
    if not _plain(a.array):
        return None
    kind = _forward_kind(a.array.shape, a.channel_axis, a.axis, max(a.offsets))
    if kind != "blocked":
        return _small_plan(a, kind)
    if strided_rows(a):
        return _strided_forward_plan(a)
    return _general_plan(forward, a, expand=False)


def strided_rows(a: ShiftSumArgs) -> bool:
    """Whether the rows of the forward's x are strided (channels-last data, say), which
    the blocked forward adds with :func:`_strided_forward_into`."""
    perm, x_shape, _ = _canonical_views(a)
    xv = a.array.transpose(perm).reshape(x_shape)  # (a copy, were it one, is contiguous)
    return bool(a.array.size) and not _rows_contiguous(xv)


def plan_adjoint(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray] | None:
    """Plan of an adjoint call: precomputed window copies, or the blocked kernel."""
    if not _plain(a.array):
        return None
    y, ax = a.array, a.axis
    rows = y.size // y.shape[ax] if y.shape[ax] else 0
    if rows * (y.shape[ax] - max(a.offsets)) * len(a.offsets) <= _SMALL_ADJOINT:
        return _small_adjoint_plan(a, raw=True)
    return _general_plan(adjoint, a, expand=not a.keepdims)


def plan_pinv(a: ShiftSumArgs) -> Callable[[Any, Any], np.ndarray] | None:
    """Plan of a pseudo-inverse call (the blocked forward and adjoint)."""
    if not _plain(a.array):
        return None
    return _general_plan(pinv, a, expand=not a.keepdims)


extend.register(
    "shift_sum",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-blocked contiguous adds over threads, mask fused per block",
    planner=plan_forward,
)(forward)
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
    planner=plan_adjoint,
)(adjoint)
extend.register(
    "shift_sum_pinv",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="blocked forward for Phi, then the blocked adjoint of y / Phi",
    planner=plan_pinv,
)(pinv)
