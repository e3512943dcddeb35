"""A bounded cache of large CPU result buffers.

A fresh 100 MB result costs more than writing it: the kernel zeroes every page on first
touch. The shift_sum adjoint writes exactly such a result, so, like PyTorch's CUDA
caching allocator, large results are carved from buffers that are kept and reused.

Each buffer is an anonymous ``mmap``; the arrays handed out are NumPy views of it, so
every array, view, memoryview or torch tensor (``torch.from_numpy``) made from a result
keeps a reference to its buffer. A buffer is reused only when its reference count shows
that nothing but this cache holds it, so reuse never aliases live data.

``PORTOPS_BUFFER_CACHE_MB`` bounds the bytes kept (default 1024; 0 turns caching off).
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import threading
from typing import Any

import numpy as np

# Smaller results come from malloc's own reused heap without page faults.
MIN_BYTES = 1 << 22
_LIMIT = int(os.environ.get("PORTOPS_BUFFER_CACHE_MB", "1024")) << 20

_lock = threading.Lock()
_buffers: list[mmap.mmap] = []
_held = 0


def _new_buffer(nbytes: int) -> mmap.mmap:
    buf = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)  # fewer faults and TLB misses
        except OSError:
            pass
    return buf


def _references_when_free() -> int:
    """``sys.getrefcount`` of a buffer that only the cache holds, seen from `empty`."""
    probe = [_new_buffer(mmap.PAGESIZE)]
    for buf in probe:
        return sys.getrefcount(buf)
    raise AssertionError


_FREE = _references_when_free()


def empty(shape: tuple[int, ...] | list[int], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, from a reused buffer when the result is large."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or _LIMIT <= 0:
        return np.empty(shape, dtype=dtype)
    global _held
    with _lock:
        chosen = None
        for buf in _buffers:
            if len(buf) == nbytes and sys.getrefcount(buf) == _FREE:
                chosen = buf
                break
        if chosen is None:
            # Make room by dropping free buffers, oldest first; else do not cache.
            for buf in list(_buffers):
                if _held + nbytes <= _LIMIT:
                    break
                if sys.getrefcount(buf) == _FREE:
                    _buffers.remove(buf)
                    _held -= len(buf)
            if _held + nbytes > _LIMIT:
                return np.empty(shape, dtype=dtype)
            chosen = _new_buffer(nbytes)
            _buffers.append(chosen)
            _held += nbytes
        else:
            _buffers.remove(chosen)  # most recently used last
            _buffers.append(chosen)
        return np.frombuffer(chosen, dtype=dtype, count=count).reshape(shape)


def cached_bytes() -> int:
    """Bytes currently kept by the cache (in use or free)."""
    return _held
