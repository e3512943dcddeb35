"""NumPy shift_sum family: cache-blocked kernels over threads (each channel one contiguous
add into a flat accumulator, exact), and plans for small arrays.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from itertools import groupby
from typing import Any, NamedTuple, cast

import numpy as np

from ... import _buffers as buffers
from ... import _machine, _threads, extend
from ..._generic import shift_sum as generic
from ..._kernels.geometry import linear_step
from ..._kernels.loader import row_loops
from ..._ops.shift_sum import ShiftSumArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority

__all__ = ["choose_forward", "forward_plan", "rows_apply", "strided_rows"]

_local = threading.local()
Run = Callable[[Any, Any], np.ndarray]
Unit = tuple[tuple[int, ...], slice]

# ------------------------------------------------------------------------------ helpers


def _canonical_shape(shape: tuple[int, ...], cax: int, ax: int) -> tuple[int, ...]:
    """``(C, *outer, W, inner)``: channels first, the dims after the shifted axis merged."""
    moved = (shape[cax], *(n for d, n in enumerate(shape) if d != cax))
    k = ax - (ax > cax) + 1  # position of the shifted axis once channels come first
    return (*moved[: k + 1], math.prod(moved[k + 1 :]))


def _mask_normalizer(a: ShiftSumArgs) -> Callable[[Any], Any]:
    """Raw mask -> the normalised one (x's number of dims, bool cast) `a` was made from."""
    if a.mask is None:
        return lambda m: m
    shape, dtype = a.mask.shape, a.mask.dtype
    return lambda m: m.astype(dtype, copy=False).reshape(shape)


class _Canonical:
    """Canonical views of arrays shaped like x and of the mask, permutation precomputed
    (np.moveaxis costs more than the rest of a small call)."""

    def __init__(self, a: ShiftSumArgs, shape: tuple[int, ...]) -> None:
        cax, ax = a.channel_axis, a.axis
        self.perm = (cax, *(d for d in range(len(shape)) if d != cax))
        self.shape = _canonical_shape(shape, cax, ax)
        self.normalize = _mask_normalizer(a)
        self.mask_full: tuple[int, ...] | None = None
        if a.mask is not None:
            self.mask_shape = _canonical_shape(a.mask.shape, cax, ax)
            if self.mask_shape[-1] not in (1, self.shape[-1]):
                # Broadcast over some of the merged inner dims: expanded over all of them.
                full = [shape[d] if d > ax and d != cax else n for d, n in enumerate(a.mask.shape)]
                self.mask_full = tuple(full)
                self.mask_shape = _canonical_shape(self.mask_full, cax, ax)

    def view(self, arr: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
        return cast("np.ndarray", arr.transpose(self.perm).reshape(shape or self.shape))

    def mask(self, raw: Any) -> Any:
        if raw is None:
            return None
        m = self.normalize(raw)
        if self.mask_full is not None:
            m = np.broadcast_to(m, self.mask_full)
        return self.view(m, self.mask_shape)


def _rows_contiguous(xv: np.ndarray) -> bool:
    """Whether each row ``xv[c, ..., :, :]`` (the last two dims) is one contiguous run."""
    width, inner = xv.shape[-2:]
    item = xv.itemsize
    return (inner == 1 or xv.strides[-1] == item) and (width == 1 or xv.strides[-2] == inner * item)


def _blocks(outer: tuple[int, ...], row_elements: int, target: int, workers: int) -> list[Unit]:
    """Work units of about `target` elements, a multiple of `workers` where possible."""
    if not outer:
        return [((), slice(None))]
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


def _workers(nbytes: int, channel_bytes: int) -> int:
    """Threads for `nbytes` moved by calls that each cover a worker's share of a channel
    (`channel_bytes`): a call on a helper thread must move ``thread_call_bytes`` to repay
    the wait for the GIL around it."""
    calls = max(1, channel_bytes // int(NUMPY["thread_call_bytes"]))
    return min(calls, _threads.workers(nbytes, NUMPY["thread_grain"]))


def _kept_bytes() -> int:
    """The largest per-thread buffer kept between calls: twice the cache a block fills
    (a strategy forced on a large x gets fresh buffers: no thread keeps x's size)."""
    return 2 * _machine.current().core_cache


def _scratch(slot: str, size: int, dtype: np.dtype) -> np.ndarray:
    """A per-thread flat buffer of `size` elements, reused from call to call."""
    cached = getattr(_local, slot, None)
    if cached is None or cached.dtype != dtype or cached.size < size:
        cached = np.empty(size, dtype=dtype)
        if cached.nbytes <= _kept_bytes():
            setattr(_local, slot, cached)
    return cached[:size]


def _sub(a: np.ndarray, prefix: tuple[int, ...], rows: slice) -> np.ndarray:
    """The block of a canonical `a` for one work unit; its outer dims of size 1 (a
    broadcast mask) are indexed at 0 or kept whole."""
    idx: list[Any] = [slice(None)]
    outer_dims = a.shape[1 : a.ndim - 2]
    for i, p in zip(prefix, outer_dims, strict=False):
        idx.append(0 if p == 1 else i)
    if len(outer_dims) > len(prefix):
        idx.append(slice(None) if outer_dims[len(prefix)] == 1 else rows)
    return cast("np.ndarray", a[tuple(idx)])


def _as_words(a: np.ndarray) -> np.ndarray:
    """`a` (rows of a few contiguous elements) with each row as one machine word, so
    that NumPy loops over the rows in one inner loop instead of one per row."""
    nbytes = a.shape[-1] * a.itemsize
    if a.shape[-1] > 1 and a.strides[-1] == a.itemsize and nbytes in (2, 4, 8):
        return a.view(f"u{nbytes}")
    return a


def _channel_windows(
    ndim: int, cax: int, ax: int, offsets: tuple[int, ...], width: int
) -> list[tuple[tuple[slice, ...], tuple[slice, ...]]]:
    """For each channel ``c``: (its index along `cax`, its window ``o_c`` along `ax`)."""
    return [
        (generic.along(ndim, cax, slice(c, c + 1)), generic.along(ndim, ax, slice(o, o + width)))
        for c, o in enumerate(offsets)
    ]


# -------------------------------------------------------------------------- the forward


def _forward_into(
    y: np.ndarray, xv: np.ndarray, mv: np.ndarray | None, offsets: tuple[int, ...], workers: int
) -> None:
    """Fill ``y`` (``(*outer, W + grow, inner)``, contiguous, the accumulation dtype)
    from x's canonical view `xv` (and the mask's, `mv`), block by block."""
    channels, *outer_dims, width, inner = xv.shape
    outer, acc = tuple(outer_dims), y.dtype
    row, out_row = width * inner, y.shape[-2] * inner
    order = sorted(range(channels), key=offsets.__getitem__)
    groups = [(o * inner, list(cs)) for o, cs in groupby(order, key=offsets.__getitem__)]

    def work(units: Iterable[Unit]) -> None:
        for prefix, rows in units:
            xu = _sub(xv, prefix, rows)
            mu = None if mv is None else _sub(mv, prefix, rows)
            yr = y[prefix][rows].reshape(-1, out_row)
            n = yr.shape[0] * row
            flat = _scratch("accumulator", n + out_row - row, acc)
            for i, (start, cs) in enumerate(groups):
                for c in cs:
                    xc = xu[c]
                    if mu is not None:  # the channel times the mask into a contiguous scratch
                        xc = _scratch("channel", n, acc).reshape(xu.shape[1:])
                        np.multiply(
                            xu[c], mu[c if mu.shape[0] > 1 else 0], out=xc, casting="unsafe"
                        )
                    if xc.flags.c_contiguous:
                        xc = xc.reshape(-1)  # one flat run: the fastest ufunc loop
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

    if _rows_contiguous(xv):
        target = _block_elements(NUMPY["forward_block_l2"], acc.itemsize)
        units = _blocks(outer, out_row, target, workers)
    else:  # each channel's gather reads x's block again: it must stay in the cache
        target = int(_machine.current().core_cache * NUMPY["block_fraction"]) // xv.itemsize
        units = _blocks(outer, channels * row, target, workers)
    _threads.run_units(units, work, workers)


def rows_apply(a: ShiftSumArgs) -> str | None:
    """None when the compiled row loop takes forward call `a`, else why not."""
    x, loops = a.array, row_loops()
    if loops is None:
        return "the compiled row loop was not built here"
    if x.dtype not in loops or np.dtype(a.acc_dtype) != x.dtype:
        return "float32 or float64 in native byte order (and a mask that casts to it), only"
    if a.axis != x.ndim - 1 or not (x.flags.c_contiguous and x.flags.aligned and x.size):
        return "x C-contiguous and aligned, shifted along its last axis"
    return None


def _rows_forward_plan(a: ShiftSumArgs) -> Run:
    """The compiled row loop over x's rows, split among threads."""
    x, cax, offsets = a.array, a.channel_axis, np.asarray(a.offsets, dtype=np.intp)
    loop, final = cast("dict[np.dtype, Any]", row_loops())[x.dtype], a.shape  # keeps no x
    channels, width, out_width = x.shape[cax], x.shape[-1], x.shape[-1] + max(a.offsets)
    per_block = math.prod(x.shape[cax + 1 : -1])  # rows between the channel and shifted axes
    rows, workers, dtype = x.size // (channels * width), _forward_threads(a), x.dtype
    layout = (per_block, channels * per_block * width, width, per_block * width, channels, width)
    step = -(-rows // (4 * workers))  # a few units per thread: they balance
    units = [(r, min(r + step, rows)) for r in range(0, rows, step)]
    normalize = _mask_normalizer(a)

    def run(x: Any, mask: Any) -> np.ndarray:
        x, y = np.ascontiguousarray(x), buffers.empty((rows, out_width), dtype)
        pointers = (y.ctypes.data, x.ctypes.data)
        tail = (out_width, offsets.ctypes.data, *_mask_rows(normalize(mask), x.shape, cax, dtype))

        def work(units: Iterable[tuple[int, int]]) -> None:
            for first, last in units:
                loop(*pointers, first, last, *layout, *tail)

        _threads.run_units(units, work, workers)
        return y.reshape(final)

    return run


def _mask_rows(mask: Any, shape: tuple[int, ...], cax: int, dtype: np.dtype) -> tuple[Any, ...]:
    """The row loop's mask arguments for a C-contiguous x of `shape`: the mask, each x row's
    offset in it, its channel stride (``.ctypes`` keep the arrays alive); or NULL, NULL, 0."""
    if mask is None:
        return None, None, 0
    m = np.require(mask, dtype, "A")  # exact: x's dtype is the call's accumulation dtype
    if m.shape[-1] != shape[-1] or m.strides[-1] != m.itemsize:  # broadcast or strided rows
        m = np.ascontiguousarray(np.broadcast_to(m, (*m.shape[:-1], shape[-1])))
    m = np.broadcast_to(m, shape)
    step, starts = [s // m.itemsize for s in m.strides], np.zeros(1, np.intp)
    for d in (d for d in range(len(shape) - 1) if d != cax):  # x's rows, in its order
        starts = (starts[:, None] + np.arange(shape[d]) * step[d]).ravel()
    return m.ctypes, starts.ctypes, step[cax]


def _forward_bytes(a: ShiftSumArgs) -> int:
    """Bytes a forward call moves: x read, y written."""
    x = a.array
    return int(x.size * x.itemsize + math.prod(a.shape) * np.dtype(a.acc_dtype).itemsize)


def _blocked_forward_plan(a: ShiftSumArgs) -> Run:
    """The blocked forward of `a`'s signature, for rows contiguous or strided."""
    canon = _Canonical(a, a.array.shape)
    _, *outer, width, inner = canon.shape
    offsets, moved, final = a.offsets, _forward_bytes(a), a.shape
    channel = _channel_bytes(a)
    y_shape = (*outer, width + max(offsets), inner)
    acc, out_dtype = np.dtype(a.acc_dtype), np.dtype(a.dtype)

    def run(x: Any, mask: Any) -> np.ndarray:
        xv = canon.view(np.asarray(x))
        y = buffers.empty(y_shape, acc)
        if xv.size == 0:
            y[...] = 0
        elif y.size:
            _forward_into(y, xv, canon.mask(mask), offsets, _workers(moved, channel))
        # (*outer, W', inner) holds the elements in the order of x's layout without channels.
        return y.astype(out_dtype, copy=False).reshape(final)

    return run


# The sheared sum (small x): channels copied into a per-thread zero-padded buffer, then
# summed as C runs lined up with y (one np.add.reduce for even offsets).


class _Sheared(NamedTuple):
    """One thread's buffer of the sheared sum for one geometry, with its views."""

    nbytes: int  # of the whole buffer
    windows: np.ndarray  # (C, *outer, W, inner): where x's rows go
    rows: np.ndarray  # the same as (C, rows, W * inner)
    total: np.ndarray | None  # (C, n): sums to y over axis 0 (evenly spaced offsets)
    runs: list[np.ndarray]  # channel c's run of n elements (any offsets)


def _sheared_forward_plan(a: ShiftSumArgs) -> Run:
    """The sheared sum of `a`'s geometry: precomputed shapes, a buffer per thread."""
    x, offsets = a.array, a.offsets
    canon = _Canonical(a, x.shape)
    channels, *outer_dims, width, inner = canon.shape
    outer, grow = tuple(outer_dims), max(offsets)
    rows = math.prod(outer)
    n = rows * (width + grow) * inner  # elements of y, and of each channel's copy
    head = grow * inner  # zeros before channel 0's copy, read by offsets above 0
    acc, out_dtype, final = np.dtype(a.acc_dtype), np.dtype(a.dtype), a.shape
    lin = linear_step(offsets)
    key = (acc, channels, outer, width, inner, offsets)

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
        return _Sheared(buf.nbytes, windows, rows_view, total, runs)

    def sheared() -> _Sheared:
        kept: OrderedDict[Any, _Sheared] | None = getattr(_local, "sheared", None)
        if kept is None:
            kept = _local.sheared = OrderedDict()
            _local.sheared_bytes = 0
        found = kept.get(key)
        if found is None:
            found = make()
            if found.nbytes > _kept_bytes():
                return found
            kept[key] = found
            _local.sheared_bytes += found.nbytes
            cache = _machine.current().core_cache
            while len(kept) > 1 and _local.sheared_bytes > cache:
                _local.sheared_bytes -= kept.popitem(last=False)[1].nbytes
        kept.move_to_end(key)
        return found

    def run(x: Any, mask: Any) -> np.ndarray:
        xv = canon.view(x)
        sh = sheared()
        if _rows_contiguous(xv):
            if mask is None:
                np.copyto(sh.windows, xv, casting="unsafe")
            else:
                np.multiply(xv, canon.mask(mask), out=sh.windows, casting="unsafe")
        else:
            if mask is not None:  # in x's own layout first: a contiguous multiply
                z = _scratch("masked", x.size, acc).reshape(x.shape)
                np.multiply(x, canon.normalize(mask), out=z, casting="unsafe")
                xv = canon.view(z)
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
    """``out[...] = src`` for strided `src` rows, a few rows at a time (stays in L1)."""
    per_row = src.shape[0] * src.shape[2] * src.itemsize
    chunk = int(NUMPY["block_fraction"] * _machine.current().l1)
    step = max(1, chunk // max(1, per_row))
    for r in range(0, src.shape[1], step):
        np.copyto(out[:, r : r + step], src[:, r : r + step], casting="unsafe")


def _loop_forward_plan(a: ShiftSumArgs) -> Run:
    """Slice-add loop, channel axis kept (size 1): least overhead for small arrays."""
    x, cax, ax = a.array, a.channel_axis, a.axis
    out_dtype, acc, final = np.dtype(a.dtype), np.dtype(a.acc_dtype), a.shape
    shape = list(x.shape)
    shape[ax] += max(a.offsets)
    shape[cax] = 1
    steps = _channel_windows(x.ndim, cax, ax, a.offsets, x.shape[ax])
    normalize = _mask_normalizer(a)

    def run(x: Any, mask: Any) -> np.ndarray:
        y = np.zeros(shape, dtype=acc)
        if mask is not None:
            # Mask applied in one call into a reused buffer (no fresh-page faults).
            z = _scratch("masked", x.size, out_dtype).reshape(x.shape)
            np.multiply(x, normalize(mask), out=z)
            x = z
        for channel, window in steps:
            y[window] += x[channel]
        return y.astype(out_dtype, copy=False).reshape(final)

    return run


# ----------------------------------------------------------------------------- the adjoint


def _adjoint_plan(a: ShiftSumArgs, blocked: bool) -> Run:
    """Each channel's window of ``y`` (times the conjugated mask) into a new result: one
    copy per channel, or (`blocked`) block by block over threads, every index precomputed."""
    shape, cax, ax, offsets = a.shape, a.channel_axis, a.axis, a.offsets
    dtype, ndim, width = np.dtype(a.dtype), len(a.shape), a.shape[a.axis]
    conj = a.mask is not None and np.iscomplexobj(a.mask)
    canon = _Canonical(a, shape)
    y_shape = _canonical_shape(a.array.shape, cax, ax)
    steps = _channel_windows(ndim, cax, ax, offsets, width)

    def run(y: Any, mask: Any) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim < ndim:
            y = np.expand_dims(y, cax)
        out = buffers.empty(shape, dtype)
        if blocked:
            if out.size:
                m = canon.mask(mask)
                _blocked_adjoint(out, canon, canon.view(y, y_shape)[0], m, offsets, conj)
            return out
        if mask is None:
            for channel, window in steps:
                out[channel] = y[window]
            return out
        m = canon.normalize(mask)
        m_channels = m.shape[cax] > 1
        if conj:
            m = np.conj(m)
        for channel, window in steps:
            np.multiply(y[window], m[channel] if m_channels else m, out=out[channel])
        return out

    return run


def _blocked_adjoint(
    out: np.ndarray,
    canon: _Canonical,
    yv: np.ndarray,
    mv: np.ndarray | None,
    offsets: tuple[int, ...],
    conj: bool,
) -> None:
    """``out[c] = conj?(mask_c) * window_c(y)`` block by block over threads, ``y`` as
    ``(*outer, W', inner)``."""
    copied = False
    try:
        view = out.transpose(canon.perm).reshape(canon.shape, copy=False)
    except ValueError:  # trailing axes that cannot merge in place: fill a copy, copy back
        view, copied = np.empty(canon.shape, dtype=out.dtype), True
    _, *outer, width, inner = canon.shape
    mask = None if mv is None else (np.conj(mv) if conj else mv)

    def work(units: Iterable[Unit]) -> None:
        for prefix, rows in units:
            yb = yv[prefix][rows] if outer else yv
            mb = None if mask is None else _sub(mask, prefix, rows)
            ob = _sub(view, prefix, rows)
            for c, o in enumerate(offsets):
                window = yb[..., o : o + width, :]
                if mb is None:
                    np.copyto(ob[c], window, casting="unsafe")
                else:
                    m = mb[c if mb.shape[0] > 1 else 0]
                    np.multiply(window, m, out=ob[c], casting="unsafe")

    nbytes = out.size * out.itemsize
    workers = _workers(2 * nbytes, nbytes // len(offsets))
    target = _block_elements(NUMPY["block_fraction"], out.itemsize)
    _threads.run_units(_blocks(tuple(outer), yv.shape[-2] * inner, target, workers), work, workers)
    if copied:
        moved = np.moveaxis(out, canon.perm[0], 0)
        np.copyto(moved, view.reshape(moved.shape))


# ------------------------------------------------------------------------- the rules


def strided_rows(a: ShiftSumArgs) -> bool:
    """Whether the rows of the forward's x are strided (channels-last data, say)."""
    xv = _Canonical(a, a.array.shape).view(a.array)  # (a copy, were it one, is contiguous)
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
    if rows_apply(a) is None:
        return "rows", "contiguous rows: the compiled loop sums each output row in L1"
    if strided_rows(a):
        return "strided", "x's rows are strided: each channel gathered from cache-sized blocks"
    return "blocked", "contiguous adds into a flat accumulator, block by block"


def choose_adjoint(a: ShiftSumArgs) -> tuple[str, str]:
    """(strategy, rule) of an adjoint call."""
    nbytes = math.prod(a.shape) * np.dtype(a.dtype).itemsize
    if nbytes <= NUMPY["small_adjoint_l2"] * _machine.current().l2:
        return "windows", f"the result fits {NUMPY['small_adjoint_l2']} L2s: one copy per channel"
    return "blocked", "window copies block by block, over threads"


def _pinv_plan(a: ShiftSumArgs) -> Run:
    """``A^H (y / Phi)``, with ``Phi`` by the forward's strategies."""
    ndim, cax, normalize_mask = len(a.shape), a.channel_axis, _mask_normalizer(a)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def forward(b: ShiftSumArgs) -> np.ndarray:
        return forward_plan(b, choose_forward(b)[0])(b.array, b.mask)

    def adjoint(b: ShiftSumArgs) -> np.ndarray:
        return _adjoint_plan(b, choose_adjoint(b)[0] == "blocked")(b.array, b.mask)

    def run(y: Any, mask: Any) -> np.ndarray:
        y = y if y.ndim == ndim else np.expand_dims(y, cax)
        b = template._replace(array=y, mask=None if mask is None else normalize_mask(mask))
        return cast("np.ndarray", generic.pinv(b, forward, adjoint))

    return run


def _channel_bytes(a: ShiftSumArgs) -> int:
    x = a.array
    return int(x.size // max(1, x.shape[a.channel_axis]) * x.itemsize)


def _forward_threads(a: ShiftSumArgs) -> int:
    return _workers(_forward_bytes(a), _channel_bytes(a))


def _adjoint_threads(a: ShiftSumArgs) -> int:
    nbytes = math.prod(a.shape) * np.dtype(a.dtype).itemsize
    return _workers(2 * nbytes, nbytes // max(1, len(a.offsets)))


FORWARD = Strategies(
    [
        Strategy(
            "blocked",
            "contiguous adds into a flat accumulator, block by block over threads",
            _blocked_forward_plan,
            threads=_forward_threads,
        ),
        Strategy(
            "strided",
            "x with strided rows: each channel gathered from cache-sized blocks (the same "
            "kernel as blocked, which sizes its blocks by the rows' layout)",
            _blocked_forward_plan,
            threads=_forward_threads,
        ),
        Strategy(
            "sheared",
            "small x: its channels' rows written once, then one sum (two NumPy calls)",
            _sheared_forward_plan,
        ),
        Strategy("loop", "small x: one slice-add per channel", _loop_forward_plan),
        Strategy(
            "rows",
            "the compiled row loop (C, where built): each output row summed in L1, threaded",
            _rows_forward_plan,
            threads=_forward_threads,
            applies=rows_apply,
        ),
    ],
    choose=choose_forward,
)
ADJOINT = Strategies(
    [
        Strategy(
            "blocked",
            "each channel's window copied block by block over threads, mask fused",
            lambda a: _adjoint_plan(a, True),
            threads=_adjoint_threads,
        ),
        Strategy(
            "windows",
            "small result: one copy (or multiply) per channel",
            lambda a: _adjoint_plan(a, False),
        ),
    ],
    choose=choose_adjoint,
)


def forward_plan(a: ShiftSumArgs, name: str) -> Run:
    """The plan of forward strategy `name` for `a`'s signature."""
    return FORWARD.by_name[name].plan(a)


PINV = Strategies(
    [
        Strategy(
            "composed",
            "Phi by the forward's strategy, then the adjoint's of y / Phi",
            _pinv_plan,
            threads=_adjoint_threads,
        )
    ],
    choose=lambda a: ("composed", "exact because A A^H is diagonal"),
)


def add_at(a: ShiftSumArgs) -> np.ndarray:
    """``np.add.at`` scatter of every element to its shifted position (alternative)."""
    x = np.asarray(a.array)
    z = x if a.mask is None else x * a.mask
    zc = np.moveaxis(z.astype(a.acc_dtype, copy=False), a.channel_axis, 0)
    k = a.axis - (a.axis > a.channel_axis)
    y_shape = list(zc.shape[1:])
    y_shape[k] += max(a.offsets)
    y = np.zeros(y_shape, dtype=zc.dtype)
    cols = np.arange(zc.shape[k + 1])
    for c, o in enumerate(a.offsets):
        np.add.at(y, generic.along(len(y_shape), k, cols + o), zc[c])
    y = np.expand_dims(y, a.channel_axis) if a.keepdims else y
    return y.astype(np.dtype(a.dtype), copy=False)


for _op, _summary, _strategies in (
    ("shift_sum", "cache-blocked contiguous adds over threads, mask fused per block", FORWARD),
    ("shift_sum_adjoint", "windows copied block by block over threads, mask fused", ADJOINT),
    ("shift_sum_pinv", "blocked forward for Phi, then the blocked adjoint of y / Phi", PINV),
):
    extend.register(
        _op,
        "numpy_blocked",
        summary=_summary,
        strategies=_strategies,
        libraries=["numpy"],
        priority=Priority.SPECIALIZED,
    )
extend.register(
    "shift_sum",
    "numpy_add_at",
    libraries=["numpy"],
    priority=Priority.BASELINE,
    summary="np.add.at scatter (alternative, for comparison)",
)(add_at)
