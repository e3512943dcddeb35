"""portops' thread pool and its limit (scoped, process, environment, cores; capped by
BLAS's via threadpoolctl so dask workers' limits hold), shared by concurrent calls."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from . import _machine
from ._validate import positive_int, setting

__all__ = ["get_num_threads", "set_num_threads", "threads", "workers"]

ENV_NUM_THREADS = "PORTOPS_NUM_THREADS"


def available_cores() -> int:
    """The cores of the machine profile in force (by default, this process's affinity)."""
    return _machine.current().cores


def _from_environment() -> int | None:
    """``PORTOPS_NUM_THREADS`` (None when unset; a malformed value warns)."""
    return setting(ENV_NUM_THREADS, None, "a positive integer", minimum=1)  # type: ignore[no-any-return]


_setting: int | None = _from_environment()
_scoped: ContextVar[int | None] = ContextVar("portops_num_threads", default=None)


def get_num_threads() -> int:
    """The number of threads portops' kernels may use in the current context.

    Returns
    -------
    int
        The innermost :func:`threads` limit, else :func:`set_num_threads`'s, else
        ``PORTOPS_NUM_THREADS``, else the machine's cores (a lower ``threadpoolctl``
        limit on NumPy's BLAS, or without one ``OMP_NUM_THREADS``, also applies when a
        kernel runs).
    """
    return _scoped.get() or _setting or available_cores()  # (each set one is at least 1)


# Read eagerly while torch.compile traces (see portops._machine.current).
get_num_threads._dynamo_marked_constant = True  # type: ignore[attr-defined]


def set_num_threads(n: int | None) -> int | None:
    """Set how many threads portops' kernels may use in this process.

    Parameters
    ----------
    n : int or None
        A positive number of threads, or None for the default (``PORTOPS_NUM_THREADS``
        if set, else the cores this process may run on).

    Returns
    -------
    int or None
        The previous setting (None when it was the default), so that it can be restored.

    Raises
    ------
    TypeError
        If `n` is not an integer or None.
    ValueError
        If `n` is less than 1.
    """
    global _setting
    previous = _setting
    _setting = _from_environment() if n is None else positive_int(n, "n")
    return previous


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Limit portops to `n` threads within a ``with`` block.

    For calls from the current thread (or asyncio task), over :func:`set_num_threads`;
    never more than ``threadpoolctl`` allows NumPy's BLAS at the time of the call (or,
    when it cannot tell, than ``OMP_NUM_THREADS``).

    Parameters
    ----------
    n : int
        A positive number of threads; 1 runs every kernel on the calling thread.

    Raises
    ------
    TypeError, ValueError
        If `n` is not a positive integer.

    Examples
    --------
    >>> import numpy as np, portops
    >>> with portops.threads(1):
    ...     y = portops.shift_sum(np.ones((2, 3, 4)), 1)
    """
    token = _scoped.set(positive_int(n, "n"))
    try:
        yield
    finally:
        _scoped.reset(token)


_blas_lookup_done = False
_blas_get: Callable[[], int] | None = None


def _blas_limit() -> int | None:
    """The thread count NumPy's BLAS may use now (else ``OMP_NUM_THREADS``), or None."""
    global _blas_lookup_done, _blas_get
    if not _blas_lookup_done:
        _blas_lookup_done = True
        try:
            import numpy  # noqa: F401  (its BLAS must be loaded to be found)
            import threadpoolctl

            found = threadpoolctl.ThreadpoolController().select(user_api="blas")
            if found.lib_controllers:
                _blas_get = found.lib_controllers[0].get_num_threads
        except Exception:  # not installed, or a library it cannot read: no limit
            _blas_get = None
    if _blas_get is not None:
        try:
            n = _blas_get()
        except Exception:
            n = None
        if isinstance(n, int) and n >= 1:
            return n
    return _openmp_at_import


def _openmp_limit() -> int | None:
    """``OMP_NUM_THREADS``'s outermost level, or None. Dask's, loky's and Ray's workers set it
    to their thread count: it stands in for a BLAS limit ``threadpoolctl`` cannot read."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) >= 1 else None


# Read once, as OpenMP runtimes and BLAS read it when they load: a dask.distributed
# cluster started later sets it in the client's own environment, for its workers.
_openmp_at_import = _openmp_limit()


def effective_threads() -> int:
    """Threads a kernel starting now may use: :func:`get_num_threads`, capped by BLAS."""
    n = get_num_threads()
    blas = _blas_limit() if n > 1 else None
    return n if blas is None else min(n, blas)


effective_threads._dynamo_marked_constant = True  # type: ignore[attr-defined]


def workers(work: int, grain: int) -> int:
    """Threads for `work` bytes: one per `grain` bytes, within [1, effective_threads()]."""
    return 1 if work < 2 * grain else max(1, min(work // grain, effective_threads()))


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_busy_lock = threading.Lock()
_busy = 0  # threads at work on portops kernels, callers included
_started = 0  # helper threads that ran work, since import (for tests and diagnosis)
_peak = 0  # the most threads at work at once, since import or peak_threads(reset=True)


def _reset_after_fork() -> None:
    """In a fork child: the parent's pool threads do not exist, and its locks may be held."""
    global _pool_lock, _pool, _pool_size, _busy_lock, _busy
    _pool_lock = threading.Lock()
    _pool, _pool_size = None, 0
    _busy_lock, _busy = threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _executor(helpers: int) -> ThreadPoolExecutor:
    """A pool of at least `helpers` threads; hold ``_pool_lock`` until submitted."""
    global _pool, _pool_size
    if _pool is None or _pool_size < helpers:
        old = _pool
        _pool = ThreadPoolExecutor(helpers, thread_name_prefix="portops")
        _pool_size = helpers
        if old is not None:
            old.shutdown(wait=False)  # work already submitted still runs, then its threads exit
    return _pool


def enter() -> None:
    """Count the calling thread as at work (pair with :func:`leave`)."""
    global _busy, _peak
    with _busy_lock:
        _busy += 1
        _peak = max(_peak, _busy)


def leave() -> None:
    global _busy
    with _busy_lock:
        _busy -= 1


def _try_enter(limit: int) -> bool:
    global _busy, _started, _peak
    with _busy_lock:
        if _busy >= limit:
            return False
        _busy += 1
        _started += 1
        _peak = max(_peak, _busy)
        return True


def submit_helpers(work: Callable[[], None], count: int, limit: int) -> list[Future[None]]:
    """Submit `count` helpers running `work`, each only while fewer than `limit` work."""

    def helper() -> None:
        if not _try_enter(limit):
            return  # other calls already use every allowed thread
        try:
            work()
        finally:
            leave()

    with _pool_lock:  # no replacement of the pool between choosing it and submitting
        pool = _executor(count)
        return [pool.submit(helper) for _ in range(count)]


def run_units(units: list[Any], work: Callable[[Iterable[Any]], None], workers: int) -> None:
    """Run `work` over `units` on this thread and up to `workers - 1` pool threads."""
    if workers <= 1 or len(units) == 1:
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

    shared: list[Callable[[Iterable[Any]], None] | None] = [work]

    def help_out() -> None:
        helper_work = shared[0]
        if helper_work is not None:
            helper_work(take())

    enter()
    try:
        count = min(workers, len(units)) - 1
        helpers = submit_helpers(help_out, count, workers)
        try:
            work(take())
        finally:
            # The pool's queue and threads may hold a helper a while after this returns:
            # it then refers to no array (every unit was taken, so it has nothing to do).
            shared[0] = None
            # A helper still queued behind another call's work has nothing left to do.
            started = [helper for helper in helpers if not helper.cancel()]
            wait(started)  # no helper may still write once this returns or raises
    finally:
        leave()
    for helper in started:
        helper.result()


def helpers_started() -> int:
    """How many helper threads have started work since import (a diagnostic)."""
    return _started


def peak_threads(reset: bool = False) -> int:
    """The most threads at work on portops kernels at once (a diagnostic)."""
    global _peak
    with _busy_lock:
        peak = _peak
        if reset:
            _peak = 0
    return peak
