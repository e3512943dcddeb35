"""Scale-out benchmarks: arrays larger than a worker's memory on a ``dask.distributed``
``LocalCluster`` of 1 and 2 single-threaded worker processes.

Each op runs on a Dask array ``FACTOR`` times a worker's memory limit, made on the
workers block by block and reduced to a scalar, so that it streams through them: the
shift_sum forward (a NumPy mask beside the Dask ``x``), its adjoint (the result is the
large array), ``einsum("bind,jnd->bnij")`` with a NumPy ``k`` and ``vecdot`` with a
NumPy vector (``--full`` only). A comparison per op and cluster size, in interleaved
rounds:

- ``portops``: the op, then ``.sum()``;
- on 2 workers, the same work through Dask's own operations (``da.pad`` and
  slice-adds, ``da.stack`` of windows, ``da.einsum``, ``(a*b).sum(-1)``);
- ``make + sum, no op``: arrays of the sizes of the op's inputs and result made and
  summed, what streaming those bytes through the cluster costs without the op.

``extra_info`` adds portops' throughput (bytes the op reads and writes per second), each
worker's peak resident memory over the comparison's rounds, the memory limit, and the
workers that were restarted or reached their limit (none should be).
``PORTOPS_BENCH_QUICK=1`` uses tiny arrays. Timings are reported, never asserted.
"""

from __future__ import annotations

import functools
import math
import operator
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

import numpy as np
import pytest

import portops
from benchmarks.dask_workers import (
    MiB,
    WorkerWatch,
    lazy_array,
    local_cluster,
    worker_memory_limit,
)
from benchmarks.interleave import Candidate

pytestmark = pytest.mark.full

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
FACTOR = 4  # the largest array / a worker's memory limit
C, H, W, STEP = 28, 256, 256, 2
GROW = STEP * (C - 1)
F32 = 4


class Work(NamedTuple):
    """One op's benchmark: lazy scalars to compute, and the sizes behind the figures."""

    portops: Callable[[], Any]
    dask: Callable[[], Any]
    roofline: Callable[[], Any]
    moved: int  # bytes the op reads and writes
    largest: int  # bytes of its largest array


def _rows(row_bytes: int) -> int:
    """Rows (first-axis entries) making an array FACTOR times the memory limit."""
    return 4 if QUICK else -(-FACTOR * worker_memory_limit() // row_bytes)


def _chunk_rows(row_bytes: int) -> int:
    """Rows per chunk: chunks of at most 16 MiB, a sixteenth of a worker's memory."""
    return max(1, min(16 * MiB // row_bytes, 2 if QUICK else 1 << 30))


def _made(shape: tuple[int, ...], chunk_rows: int | None = None) -> Any:
    row = math.prod(shape[1:]) * F32
    return lazy_array(shape, chunk_rows or _chunk_rows(row))


def _mask() -> np.ndarray:
    return np.random.default_rng(0).random((H, W)).astype(np.float32)


def _pad_slice_add(x: Any, mask: np.ndarray) -> Any:
    """shift_sum through Dask's own operations: pad once, then add shifted slices."""
    import dask.array as da

    xm = x * mask
    padded = da.pad(xm, ((0, 0), (0, 0), (0, 0), (GROW, GROW))).rechunk({3: -1})
    terms = [padded[:, c, :, GROW - c * STEP : 2 * GROW - c * STEP + W] for c in range(C)]
    return functools.reduce(operator.add, terms)


def _stacked_windows(y: Any, mask: np.ndarray) -> Any:
    """The adjoint through Dask's own operations: a stack of windows, times the mask."""
    import dask.array as da

    return da.stack([y[..., c * STEP : c * STEP + W] for c in range(C)], axis=1) * mask


def shift_sum_work() -> Work:
    b = _rows(C * H * W * F32)
    x, mask = _made((b, C, H, W)), _mask()
    y_shape = (b, H, W + GROW)
    return Work(
        portops=lambda: portops.shift_sum(x, STEP, mask=mask).sum(),
        dask=lambda: _pad_slice_add(x, mask).sum(),
        roofline=lambda: x.sum() + _made(y_shape).sum(),
        moved=x.nbytes + math.prod(y_shape) * F32,
        largest=x.nbytes,
    )


def adjoint_work() -> Work:
    b = _rows(C * H * W * F32)
    x_shape = (b, C, H, W)
    # Chunks of y by the size of the result's chunks, which are C*W/(W+GROW) times larger.
    y, mask = _made((b, H, W + GROW), _chunk_rows(C * H * W * F32)), _mask()
    return Work(
        portops=lambda: portops.shift_sum_adjoint(y, STEP, channels=C, mask=mask).sum(),
        dask=lambda: _stacked_windows(y, mask).sum(),
        roofline=lambda: y.sum() + _made(x_shape).sum(),
        moved=y.nbytes + math.prod(x_shape) * F32,
        largest=math.prod(x_shape) * F32,
    )


def einsum_work() -> Work:
    import dask.array as da

    heads, i, j, d = 8, 100, 50, 128  # MXNet issue 18043's attention shapes
    b = _rows(i * heads * d * F32)
    q = _made((b, i, heads, d))
    k = np.random.default_rng(1).standard_normal((j, heads, d), dtype=np.float32)
    out_shape = (b, heads, i, j)
    eq = "bind,jnd->bnij"
    return Work(
        portops=lambda: portops.einsum(eq, q, k).sum(),
        dask=lambda: da.einsum(eq, q, k, optimize=True).sum(),
        roofline=lambda: q.sum() + _made(out_shape).sum(),
        moved=q.nbytes + k.nbytes + math.prod(out_shape) * F32,
        largest=q.nbytes,
    )


def vecdot_work() -> Work:
    n = 1024
    a = _made((_rows(n * F32), n))
    v = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    out = (a.shape[0],)
    return Work(
        portops=lambda: portops.vecdot(a, v).sum(),
        dask=lambda: (a * v).sum(-1).sum(),
        roofline=lambda: a.sum() + _made(out).sum(),
        moved=a.nbytes + v.nbytes + math.prod(out) * F32,
        largest=a.nbytes,
    )


WORK = {
    "shift_sum": shift_sum_work,
    "shift_sum_adjoint": adjoint_work,
    "einsum": einsum_work,
    "vecdot": vecdot_work,
}
DASK_NAMES = {
    "shift_sum": "da.pad + slice-adds",
    "shift_sum_adjoint": "da.stack of windows",
    "einsum": "da.einsum(optimize=True)",
    "vecdot": "(a*b).sum(-1)",
}
# Two workers, with Dask's own operations beside portops; then one, for the scaling.
ENTRIES = [(workers, op) for workers in (2, 1) for op in WORK]
# Each round streams over a GB through two cores: seconds per candidate, so few rounds.
ROUNDS = 2


def _warm_up() -> None:
    """Import portops on the workers and run each op once on tiny arrays."""
    import dask
    import dask.array as da

    x = da.ones((2, 3, 4, 5), chunks=1, dtype=np.float32)
    mask = np.ones((4, 5), np.float32)
    y = portops.shift_sum(x, 1, mask=mask)
    dask.compute(
        y,
        portops.shift_sum_adjoint(y, 1, channels=3, mask=mask),
        portops.einsum("bchw,hw->bc", x, mask),
        portops.vecdot(x, mask[0]),
    )


class Clusters:
    """One LocalCluster at a time, started when a benchmark first asks for its size."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._workers = 0
        self.client: Any = None

    def get(self, workers: int) -> Any:
        """A client of a cluster of `workers` workers (replacing one of another size)."""
        if workers != self._workers:
            self.close()
            self.client = self._stack.enter_context(local_cluster(workers, worker_memory_limit()))
            self._workers = workers
            _warm_up()
        return self.client

    def close(self) -> None:
        self._stack.close()
        self._workers, self.client = 0, None


@pytest.fixture(scope="module")
def clusters() -> Iterator[Clusters]:
    pytest.importorskip("dask")
    pytest.importorskip("distributed")
    pool = Clusters()
    try:
        yield pool
    finally:
        pool.close()


@pytest.mark.parametrize(("workers", "op"), ENTRIES, ids=[f"{w}w-{op}" for w, op in ENTRIES])
def test_cluster(compare: Any, benchmark: Any, clusters: Clusters, workers: int, op: str) -> None:
    client = clusters.get(workers)
    work = WORK[op]()
    candidates = [Candidate("portops", "default", work.portops().compute)]
    if workers == 2:
        candidates.append(Candidate(DASK_NAMES[op], "native", work.dask().compute))
    candidates.append(Candidate("make + sum, no op", "baseline", work.roofline().compute))
    watch = WorkerWatch(client)
    watch.reset()
    rounds = compare(
        candidates,
        op=op,
        case=f"cluster {workers}x{worker_memory_limit() // MiB}MiB {work.largest / 1e9:.2g}GB",
        backend="dask",
        label=f"{workers} worker" + "s" * (workers > 1),
        nbytes=work.moved,
        min_rounds=ROUNDS,
        extra_s=0.0,
    )
    if rounds is None:
        return
    peaks = watch.peaks()  # over every candidate's rounds
    benchmark.extra_info.update(
        {
            "workers": workers,
            "memory_limit_mib": worker_memory_limit() // MiB,
            "largest_array_gb": work.largest / 1e9,
            "gb_per_s": work.moved / rounds.median("portops") / 1e9,
            "worker_peak_mib": sorted(round(p / MiB) for p in peaks.values()),
            "restarted": watch.restarted(),
            "over_limit": watch.over_limit(peaks),
        }
    )
