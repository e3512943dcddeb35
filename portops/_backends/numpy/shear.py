"""NumPy shear / unshear: a strided zero-fill and one strided copy (see portops._shear.strided).

Large arrays are cut into one slab per core along their first axis; NumPy releases
the GIL inside each copy, so the slabs are copied at the same time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ... import _buffers as buffers
from ... import extend
from ..._ops.shear import ShearArgs
from ..._shear import strided
from ...extend import Priority

# Below this many elements of the sheared cube one thread is faster (hand-over costs).
_THREADED = 1 << 22

_lock = threading.Lock()
_pool: list[ThreadPoolExecutor] = []


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _threads(work: Callable[[int, int], None]) -> None:
    """``work(part, parts)`` for one part per core, this thread taking the first."""
    parts = _workers()
    if parts == 1:
        work(0, 1)
        return
    with _lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(parts - 1, thread_name_prefix="portops-shear"))
    futures = [_pool[0].submit(work, p, parts) for p in range(1, parts)]
    try:
        work(0, parts)
    finally:
        for f in futures:
            f.result()  # no part may still write once this returns


def _parallel(a: ShearArgs) -> strided.Parallel:
    return _threads if a.array.size >= _THREADED else strided.serial


def shear(a: ShearArgs) -> np.ndarray:
    """Gaps zeroed through strided views, then ``x`` copied into the windows' view."""
    a = a._replace(array=np.asarray(a.array))
    return strided.shear(np, buffers.empty, a, _parallel(a))


def unshear(a: ShearArgs) -> np.ndarray:
    """One copy of the strided view of every window of ``y`` (mask fused)."""
    a = a._replace(array=np.asarray(a.array))
    return strided.unshear(np, buffers.empty, a, _parallel(a))


extend.register(
    "shear",
    "numpy_strided",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="zero-fill of the gaps, one strided copy into the windows' view, over threads",
)(shear)
extend.register(
    "unshear",
    "numpy_strided",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="one strided copy of the windows' view (as_strided), mask fused, over threads",
)(unshear)
