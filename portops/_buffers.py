"""A bounded cache of large CPU result buffers: recurring sizes reuse kept mmaps (no
fresh page zeroing); ``PORTOPS_BUFFER_CACHE_MB`` sets the bound (0: off).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import threading
from contextlib import suppress
from typing import Any, NamedTuple

import numpy as np

from ._validate import integer, setting

__all__ = ["CacheInfo", "cache_info", "clear_cache", "empty", "set_cache_limit"]

# Results from 4 MiB on come from here; smaller ones from malloc's own reused heap.
MIN_BYTES = 1 << 22
ENV_CACHE_MB = "PORTOPS_BUFFER_CACHE_MB"
# Large requests within which a size must recur to be cached, a free buffer be reused.
RECENT = 16


def _default_limit() -> int:
    """256 MB, or 1/64 of the physical memory if less (a laptop running several workers)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 0
    limit = 256 << 20
    return min(limit, memory // 64) if memory > 0 else limit


_lock = threading.Lock()
# PORTOPS_BUFFER_CACHE_MB in bytes (the default when unset; malformed warns).
_megabytes = setting(ENV_CACHE_MB, None, "a non-negative number of megabytes", float)
_limit = _default_limit() if _megabytes is None else int(_megabytes * (1 << 20))
_buffers: list[mmap.mmap] = []  # least recently used first
_last_use: list[int] = []  # the request count when each of _buffers was last handed out
_recent_sizes: dict[int, int] = {}  # size in bytes -> request count when last asked for
_requests = 0  # large requests so far
_held = _hits = _misses = 0

_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def _new_buffer(nbytes: int) -> mmap.mmap:
    # (Windows has no flags: its anonymous mappings are not inherited by children.)
    buf = mmap.mmap(-1, nbytes, flags=_PRIVATE) if _PRIVATE else mmap.mmap(-1, nbytes)
    with suppress(AttributeError, OSError):  # (no madvise, or no huge pages, here)
        buf.madvise(mmap.MADV_HUGEPAGE)  # fewer faults and TLB misses
    return buf


def _free_refcount() -> int:
    """``sys.getrefcount(_buffers[i])`` for a buffer that only the cache's list holds."""
    probe = [_new_buffer(mmap.PAGESIZE)]
    count = sys.getrefcount(probe[0])
    probe[0].close()
    return count


_FREE = _free_refcount()


def _is_free(i: int) -> bool:
    # Always this expression, so the references counted are always the same.
    return sys.getrefcount(_buffers[i]) == _FREE


def _reset_after_fork() -> None:
    # The parent's lock may be held at fork(); the child's buffers are private copies.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _drop(i: int) -> None:
    global _held
    _held -= len(_buffers.pop(i))  # the last reference: unmapped now
    _last_use.pop(i)


def _evict(target: int, stale: int = -1) -> None:
    """Drop free buffers unused since `stale`, then LRU ones until `target` bytes are held."""
    i = 0
    while i < len(_buffers):
        if (_held > target or _last_use[i] < stale) and _is_free(i):
            _drop(i)
        else:
            i += 1


def empty(shape: tuple[int, ...] | list[int], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, from a reused buffer for large recurring sizes."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or nbytes > _limit:
        return np.empty(shape, dtype=dtype)
    global _held, _hits, _misses, _requests
    with _lock:
        _requests += 1
        stale = _requests - RECENT  # free buffers and sizes not seen since are forgotten
        _evict(sys.maxsize, stale)
        for size in [s for s, seen in _recent_sizes.items() if seen < stale]:
            del _recent_sizes[size]
        recurs = nbytes in _recent_sizes
        _recent_sizes[nbytes] = _requests
        chosen = None
        for i in range(len(_buffers)):
            if len(_buffers[i]) == nbytes and _is_free(i):
                chosen = _buffers.pop(i)
                _last_use.pop(i)
                _hits += 1
                break
        if chosen is None:
            _misses += 1
            if not recurs:
                return np.empty(shape, dtype=dtype)  # cached from its second request
            _evict(_limit - nbytes)
            if _held + nbytes > _limit:
                return np.empty(shape, dtype=dtype)
            chosen = _new_buffer(nbytes)
            _held += nbytes
        _buffers.append(chosen)  # most recently used last
        _last_use.append(_requests)
        return np.frombuffer(chosen, dtype=dtype, count=count).reshape(shape)


class CacheInfo(NamedTuple):
    """What the result-buffer cache holds; see :func:`cache_info`."""

    hits: int
    misses: int
    buffers: int
    in_use: int
    held_bytes: int
    max_bytes: int


def cache_info() -> CacheInfo:
    """Statistics of the cache of large CPU result buffers.

    Recurring large results (4 MiB or more) of the NumPy and torch CPU kernels are
    carved from kept buffers, saving the zeroing of fresh pages.

    Returns
    -------
    CacheInfo
        ``hits`` and ``misses``: calls served by a reused buffer, and those that were
        not; ``buffers``: buffers held; ``in_use``: those still backing a live result;
        ``held_bytes``: their total size; ``max_bytes``: the bound on ``held_bytes``.
    """
    with _lock:
        in_use = sum(not _is_free(i) for i in range(len(_buffers)))
        return CacheInfo(_hits, _misses, len(_buffers), in_use, _held, _limit)


def clear_cache() -> None:
    """Release every cached buffer (one backing a live result: when the result is freed)."""
    global _held
    with _lock:
        _buffers.clear()
        _last_use.clear()
        _recent_sizes.clear()
        _held = 0


def set_cache_limit(max_bytes: int) -> int:
    """Bound the bytes that the result-buffer cache may hold.

    Parameters
    ----------
    max_bytes : int
        The bound, in bytes; 0 turns caching off. Free buffers beyond it are released
        at once. The default is ``PORTOPS_BUFFER_CACHE_MB`` megabytes (when unset, 256 MB
        or 1/64 of the machine's memory, whichever is less).

    Returns
    -------
    int
        The previous bound, in bytes.

    Raises
    ------
    TypeError
        If `max_bytes` is not an integer.
    ValueError
        If `max_bytes` is negative.
    """
    value = integer(max_bytes, "max_bytes", "a non-negative integer")
    if value < 0:
        raise ValueError(f"max_bytes must be a non-negative integer, got {value}")
    global _limit
    with _lock:
        previous, _limit = _limit, value
        _evict(value)
    return previous
