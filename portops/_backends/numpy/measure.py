"""The NumPy tuning parameters measured for :func:`portops.tune`: best-of timings of
small, cache-resident workloads, which another process's load moves little."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ... import _threads
from .einsum import c_einsum

__all__ = ["einsum_loop_flops", "thread_grain", "vecdot_short"]


def _best(fn: Callable[[], Any], repeat: int = 7, number: int = 20) -> float:
    """The best per-call time of `fn` over `repeat` rounds of `number` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def vecdot_short() -> int:
    """The shortest contiguous vectors on which ``np.vecdot`` is as fast as einsum's loop."""
    rng = np.random.default_rng(0)
    for n in (4, 8, 16, 32, 64, 128):
        a = rng.standard_normal((1 << 16) // n * 2, dtype=np.float32).reshape(-1, n)
        b = rng.standard_normal(a.shape, dtype=np.float32)
        if _best(partial(np.vecdot, a, b)) <= _best(partial(c_einsum, "...i,...i->...", a, b)):
            return n
    return 128


def einsum_loop_flops() -> int:
    """How many products of einsum's C loop cost as much as one NumPy call."""
    tiny = np.ones(4, dtype=np.float32)
    call = _best(lambda: np.add(tiny, tiny), number=200)
    a = np.ones((256, 256), dtype=np.float32)
    per_product = _best(lambda: c_einsum("ij,ij->i", a, a)) / a.size
    return max(100, int(round(call / per_product, -1)))


def _copy(src: np.ndarray, dst: np.ndarray, todo: Any) -> None:
    for s in todo:
        np.copyto(dst[s], src[s])


def thread_grain() -> int:
    """Bytes a thread must move for two threads to beat one by a tenth: half the
    smallest copy where they do (the default where there is one core)."""
    from ..._tables import NUMPY

    if _threads.effective_threads() < 2:
        return int(NUMPY["thread_grain"])
    for mb in (1, 2, 4, 8, 16, 32):
        n = (mb << 20) // 8  # float32 elements of each of source and target
        src = np.ones(n, dtype=np.float32)
        dst = np.empty_like(src)
        chunk = max(1, n // 16)
        units = [slice(i, i + chunk) for i in range(0, n, chunk)]
        work = partial(_copy, src, dst)
        one = _best(partial(_threads.run_units, units, work, 1), number=3)
        two = _best(partial(_threads.run_units, units, work, 2), number=3)
        if two * 1.1 <= one:
            return (mb << 20) // 2
    return 32 << 20
