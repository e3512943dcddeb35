"""A matrix times one vector that never waits on a descheduled BLAS thread.

BLAS's GEMV is the fastest vecdot of many vectors against one: it reads the matrix
once, vectorised across rows, and from about a mebibyte of float32 OpenBLAS splits it
over every core. Those threads hand work over by spinning, so while another process
holds a core a call waits for a scheduler time slice (4096x1024 float32 on a loaded
2-core machine: 5 ms instead of 0.34 ms) — and NumPy's own ``@`` waits the same way.

:class:`Matvec` plans such a product two ways: the threaded GEMV, or a stack of row
blocks (one ``np.matmul`` over a 3-d view), each small enough that BLAS keeps it on
the calling thread, which reads the matrix at one core's speed but never waits. It
threads unless the latest threaded call took a time slice (STALL_S) longer than the
latest blocked one; once every PROBE_S seconds it takes the other way, and after a
stall it tries threads again after PROBE_S, then twice as long each time they stall
again (up to MAX_WAIT_S), so it follows the machine's load as it changes without
paying a stall every PROBE_S. A call slowed by less than a stall does not move it
off the threads, which are up to twice as fast when they run.
Both ways compute each row's dot product with BLAS's kernels; the last bits may
differ between the two.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .shift_sum import _l2_bytes

__all__ = ["BLOCK_BYTES", "MAX_WAIT_S", "MIN_ROWS", "PROBE_S", "STALL_S", "Matvec", "blocked"]

# Bytes of the matrix per block: an eighth of one core's L2 (256 KiB for 2 MiB), far
# below the size from which OpenBLAS splits a GEMV over threads.
BLOCK_BYTES = max(1 << 15, _l2_bytes() // 8)
MIN_ROWS = 64  # a GEMV kernel works across rows: blocks of fewer gain little
PROBE_S = 0.5  # how often a plan times the way it is not taking
STALL_S = 1e-3  # about a scheduler time slice: what a descheduled thread costs
MAX_WAIT_S = 8.0  # the longest wait between probes of threads that keep stalling


def blocked(many: np.ndarray, one: np.ndarray) -> np.ndarray:
    """``many @ one`` for a C-contiguous matrix, as single-threaded row blocks; rows
    too long for MIN_ROWS of them to fill a block go to ``np.vecdot``, whose call per
    row costs little beside a long row (256x4096: 140 us against 160 in blocks)."""
    rows, n = many.shape
    step = BLOCK_BYTES // max(1, n * many.itemsize)
    if step < MIN_ROWS:
        result: np.ndarray = np.vecdot(many, one)
        return result
    k = rows // step
    out = np.empty(rows, np.result_type(many, one))
    if k:
        np.matmul(many[: k * step].reshape(k, step, n), one, out=out[: k * step].reshape(k, step))
    if k * step < rows:
        np.matmul(many[k * step :], one, out=out[k * step :])
    return out


class Matvec:
    """Plan of ``x1 @ x2`` (or ``x2 @ x1`` when `swap`) for a C-contiguous matrix and
    one vector of a real dtype, large enough for BLAS to thread (see the module)."""

    __slots__ = ("next_probe", "swap", "took", "use_threads", "wait")

    def __init__(self, swap: bool) -> None:
        self.swap = swap
        # Seconds the latest call each way took: the first call (a probe) blocks, the
        # second one threads, and from then on the rule of the module's docstring.
        self.took = [float("inf"), 0.0]  # [blocks, threads]
        self.use_threads = True
        self.next_probe = 0.0
        self.wait = PROBE_S  # until the next probe; doubles while threads keep stalling

    def __call__(self, x1: np.ndarray, x2: np.ndarray) -> Any:
        many, one = (x2, x1) if self.swap else (x1, x2)
        start = time.perf_counter()
        probe = start >= self.next_probe
        threads = self.use_threads != probe  # a probe takes the other way
        # np.matmul, not ndarray.dot: its GEMV call is faster for short rows (65536x2:
        # 27 us against 34); past BLOCK_BYTES their fixed costs do not matter.
        r = np.matmul(many, one) if threads else blocked(many, one)
        took = self.took
        took[threads] = time.perf_counter() - start
        use_threads = took[1] < took[0] + STALL_S
        if threads and not use_threads:  # a stall: try threads again after a while
            self.wait = min(MAX_WAIT_S, 2 * self.wait) if probe else self.wait
            self.next_probe = start + self.wait
        elif probe:
            if threads:  # threads are back
                self.wait = PROBE_S
            self.next_probe = start + self.wait
        self.use_threads = use_threads
        return r
