"""A Dask array four times a worker's memory streams through shift_sum and its adjoint
on a two-worker ``dask.distributed`` cluster: no worker reaches its memory limit or is
restarted, and the results are right."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from backends import require

import portops

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the worker processes import benchmarks.dask_workers

C, H, W, STEP = 28, 256, 256, 2


@pytest.mark.slow
def test_array_four_times_a_worker_streams_through_shift_sum_and_adjoint() -> None:
    require("dask")
    pytest.importorskip("distributed")
    import dask

    from benchmarks.dask_workers import (
        WorkerWatch,
        lazy_array,
        local_cluster,
        worker_memory_limit,
    )

    limit = worker_memory_limit()  # per worker: 256 MiB here (no CuPy to import)
    batch = -(-4 * limit // (C * H * W * 4))  # x is float32, at least 4x the limit
    x = lazy_array((batch, C, H, W), rows=1)
    assert x.nbytes >= 4 * limit
    mask = np.random.default_rng(0).random((H, W)).astype(np.float32)  # in memory, as users have it
    # sum(A^T y) = <y, A 1>: each y column counted once per channel whose window holds it.
    weights = portops.shift_sum(np.ones((C, H, W), np.float32), STEP, mask=mask)
    with local_cluster(2, limit) as client:
        watch = WorkerWatch(client)
        watch.reset()
        y = portops.shift_sum(x, STEP, mask=mask)
        x_adj = portops.shift_sum_adjoint(y, STEP, channels=C, mask=mask)
        # Totals over everything, and the first batch element against NumPy.
        totals, firsts = dask.compute(
            (
                y.sum(dtype=np.float64),
                (x * mask).sum(dtype=np.float64),
                x_adj.sum(dtype=np.float64),
                (y * weights).sum(dtype=np.float64),
            ),
            (x[0], y[0], x_adj[0]),
        )
        peaks = watch.peaks()
        assert watch.restarted() == [], "a worker was restarted"
        assert watch.over_limit(peaks) == [], f"peak memory {peaks} reached {limit}"
    x0, y0, adj0 = firsts
    np.testing.assert_allclose(y0, portops.shift_sum(x0, STEP, mask=mask), rtol=1e-6)
    np.testing.assert_allclose(
        adj0, portops.shift_sum_adjoint(y0, STEP, channels=C, mask=mask), rtol=1e-6
    )
    np.testing.assert_allclose(totals[0], totals[1], rtol=1e-5)
    np.testing.assert_allclose(totals[2], totals[3], rtol=1e-5)
