"""A ``dask.distributed`` cluster whose workers report their peak memory and restarts.

Used by the cluster benchmarks (``benchmarks/test_dask_cluster.py``) and by the test
that a Dask array larger than a worker's memory streams through shift_sum
(``tests/test_dask_scale_out.py``). Worker processes must be able to import this module
and portops: they inherit the parent's ``sys.path`` (multiprocessing's spawn does).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

MiB = 1 << 20


# --------------------------------------------------------------------------- on a worker


def reset_peak_memory() -> bool:
    """Reset this process's peak resident set size (Linux ``clear_refs``); False if not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_memory() -> int:
    """Peak resident set size of this process in bytes, since the last reset."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


# --------------------------------------------------------------------------- on the client


@functools.cache
def worker_memory_limit(work: int = 160 * MiB) -> int:
    """A worker's memory limit: `work` bytes for the data in flight, on top of what a
    worker's imports hold on this machine, rounded up to 64 MiB.

    The imports differ from machine to machine: ``import dask.array`` also imports SciPy,
    and CuPy with its CUDA libraries where CuPy is installed. Measured once, in a fresh
    interpreter set up as a worker is (``OMP_NUM_THREADS=1``, the same ``sys.path``).
    """
    code = (
        "import distributed, dask.array, portops\n"
        "from benchmarks.dask_workers import peak_memory\n"
        "print(peak_memory())"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    imports = int(done.stdout.split()[-1])
    return -(-(imports + work) // (64 * MiB)) * 64 * MiB


@contextmanager
def local_cluster(n_workers: int, memory_limit: int) -> Iterator[Any]:
    """A ``LocalCluster`` of `n_workers` single-threaded worker processes, and its client.

    Each worker has `memory_limit` bytes: its nanny restarts it above 95% of that.
    """
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


class WorkerWatch:
    """The workers of a client as first seen: their process ids and memory limits.

    `restarted` names the workers that have since died or been replaced (a nanny
    restarts a worker that exceeds its memory), `peaks` their peak memory since
    `reset`.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pids: dict[str, int] = client.run(os.getpid)
        info = client.scheduler_info()["workers"]
        self.limits: dict[str, int] = {a: int(w["memory_limit"]) for a, w in info.items()}

    def reset(self) -> None:
        """Start a new peak-memory interval on every worker."""
        self.client.run(reset_peak_memory)

    def peaks(self) -> dict[str, int]:
        """Peak resident memory of each worker, in bytes, since `reset`."""
        result: dict[str, int] = self.client.run(peak_memory)
        return result

    def restarted(self) -> list[str]:
        """The workers whose process is no longer the one first seen."""
        now: dict[str, int] = self.client.run(os.getpid)
        return sorted(a for a, pid in self.pids.items() if now.get(a) != pid)

    def over_limit(self, peaks: dict[str, int]) -> list[str]:
        """The workers whose peak memory reached their memory limit."""
        return sorted(a for a, p in peaks.items() if p >= self.limits.get(a, math.inf))


def lazy_array(shape: tuple[int, ...], rows: int, dtype: Any = np.float32) -> Any:
    """A Dask array made on the workers (nothing sent from the client), ``rows`` of the
    first axis per chunk, the other axes whole: ``arange`` reshaped, as cheap to make as
    writing the memory."""
    import dask.array as da

    per_row = math.prod(shape[1:])
    return da.arange(math.prod(shape), chunks=per_row * rows, dtype=dtype).reshape(shape)
