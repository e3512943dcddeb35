"""Reliability: results across processes, the cache's bound, thread limits, bad input.

Fork scenarios check every element of every result on both sides; their minimum
counts of results checked add up to more than 1000 (A 240, B 398, C 240, D 180,
E 2 x 40), and each asserts that none is corrupted.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import reliability_workers as rw
from backends import pythonpath
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import portops
from portops import _threads

FORK = "fork" in mp.get_all_start_methods()
needs_fork = pytest.mark.skipif(not FORK, reason="no fork() on this platform")
TIMEOUT = 120


def _warm_cache() -> None:
    """Leave a free buffer of the test size in the cache, as after any earlier call."""
    del_me = rw.constant_result(-1.0)
    assert rw.holds(del_me, -1.0)
    del del_me


# -- A: a result inherited by a fork child ----------------------------------------


def _inherit_child(keep: list[Any], values: list[float], go: Any, done: Any, report: Any) -> None:
    go.wait(TIMEOUT)  # the parent has dropped its copies and made new results
    bad = sum(not rw.holds(r, v) for r, v in zip(keep, values, strict=True))
    own = [rw.constant_result(v + 0.5) for v in values]
    done.wait(TIMEOUT)  # the parent made still more results meanwhile
    bad += sum(not rw.holds(r, v + 0.5) for r, v in zip(own, values, strict=True))
    report.put((2 * len(values), bad))


@needs_fork
def test_fork_inherited_results_are_not_overwritten():
    ctx = mp.get_context("fork")
    checked = bad = 0
    for round_ in range(10):
        values = [100.0 * round_ + k for k in range(8)]
        keep = [rw.constant_result(v) for v in values]
        go, done, report = ctx.Event(), ctx.Event(), ctx.Queue()
        child = ctx.Process(target=_inherit_child, args=(keep, values, go, done, report))
        child.start()
        del keep  # the parent's copies are free: its next results reuse their buffers
        mine = [rw.constant_result(-v) for v in values]
        go.set()
        more = [rw.constant_result(-v - 0.5) for v in values]
        done.set()
        c, b = report.get(timeout=TIMEOUT)
        child.join(TIMEOUT)
        assert child.exitcode == 0
        bad += b + sum(not rw.holds(r, -v) for r, v in zip(mine, values, strict=True))
        bad += sum(not rw.holds(r, -v - 0.5) for r, v in zip(more, values, strict=True))
        checked += c + 2 * len(values)
    assert checked >= 240
    assert bad == 0, f"{bad} of {checked} results corrupted"


# -- B: both sides computing after a fork -----------------------------------------


def _both_sides(side: float, rounds: int, barrier: Any) -> tuple[int, int]:
    checked = bad = 0
    previous = None
    for i in range(rounds):
        value = side * 10_000 + i
        result = rw.constant_result(value)
        barrier.wait(TIMEOUT)  # both sides have written their results
        bad += not rw.holds(result, value)
        if previous is not None:
            bad += not rw.holds(previous[0], previous[1])
            checked += 1
        checked += 1
        barrier.wait(TIMEOUT)  # both sides have checked before anything is reused
        previous = (result, value)
    return checked, bad


def _both_sides_child(rounds: int, barrier: Any, report: Any) -> None:
    report.put(_both_sides(2.0, rounds, barrier))


@needs_fork
def test_fork_both_sides_computing():
    ctx = mp.get_context("fork")
    _warm_cache()
    barrier, report = ctx.Barrier(2), ctx.Queue()
    child = ctx.Process(target=_both_sides_child, args=(100, barrier, report))
    child.start()
    checked, bad = _both_sides(1.0, 100, barrier)
    c, b = report.get(timeout=TIMEOUT)
    child.join(TIMEOUT)
    assert child.exitcode == 0
    checked, bad = checked + c, bad + b
    assert checked >= 398
    assert bad == 0, f"{bad} of {checked} results corrupted"


# -- C: a multiprocessing fork pool; E: spawn and forkserver pools -----------------


def _pool_round(method: str, tasks: int) -> tuple[int, int]:
    ctx = mp.get_context(method)
    _warm_cache()
    checked = bad = 0
    with ctx.Pool(2) as pool:
        pending = pool.map_async(rw.compute_and_check, [float(v) for v in range(tasks)])
        mine = []
        while not pending.ready():  # the parent computes while the workers do
            k = len(mine)
            mine.append((rw.constant_result(-1000.0 - k), -1000.0 - k))
            if len(mine) > 3:
                r, v = mine.pop(0)
                bad += not rw.holds(r, v)
                checked += 1
            pending.wait(0.01)
        for c, b in pending.get(TIMEOUT):
            checked, bad = checked + c, bad + b
        bad += sum(not rw.holds(r, v) for r, v in mine)
        checked += len(mine)
    return checked, bad


@needs_fork
def test_fork_pool_results_are_not_shared():
    checked, bad = _pool_round("fork", 60)
    assert checked >= 240
    assert bad == 0, f"{bad} of {checked} results corrupted"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_and_forkserver_pools(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    checked, bad = _pool_round(method, 10)
    assert checked >= 40
    assert bad == 0, f"{bad} of {checked} results corrupted"


# -- D: torch DataLoader workers (fork) ---------------------------------------------


@needs_fork
def test_torch_dataloader_fork_workers():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    _warm_cache()
    rw.constant_result(-2.0, "torch")  # and a free torch result buffer
    n = 60
    loader = DataLoader(
        rw.ConstantResults(n),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
    )
    checked = bad = 0
    for i, (item, spare_held) in enumerate(loader):
        assert isinstance(item, torch.Tensor)
        bad += (not rw.holds(item, float(i))) + (not spare_held)
        mine = rw.constant_result(float(-i - 0.5), "torch")  # the parent computes too
        bad += not rw.holds(mine, float(-i - 0.5))
        checked += 3
    assert checked >= 180
    assert bad == 0, f"{bad} of {checked} results corrupted"


# -- the cache: bounded in resident memory, least recently used evicted, public ------

needs_proc = pytest.mark.skipif(
    not Path("/proc/self/statm").exists(), reason="resident memory read from /proc"
)


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": pythonpath(str(root)), **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@needs_proc
def test_resident_memory_stays_within_bound_plus_live_results():
    """1000 calls, 40 result shapes (4-11 MiB), NumPy and torch: resident memory above
    the start stays within the cache's bound plus the results still alive."""
    out = _run_python(
        """
        import os
        import numpy as np
        import portops

        page = os.sysconf("SC_PAGE_SIZE")

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page

        try:
            import torch
        except ImportError:
            torch = None
        ys = [np.ones((256, 1027 + 48 * k), np.float32) for k in range(40)]
        ts = [torch.from_numpy(y) for y in ys] if torch is not None else ys
        portops.shift_sum_adjoint(ys[0][:4], 1, channels=4)  # imports, below the cache size
        portops.shift_sum_adjoint(ts[0][:4], 1, channels=4)
        portops.set_cache_limit(64 << 20)
        base = rss()
        live, worst = [], 0
        for i in range(1000):
            src = ts if i % 2 else ys
            live.append(portops.shift_sum_adjoint(src[(7 * i) % 40], 1, channels=4))
            if len(live) > 2:
                live.pop(0)
            live_bytes = sum(r.nbytes for r in live)
            worst = max(worst, rss() - base - live_bytes)
            assert portops.cache_info().held_bytes <= 64 << 20
        info = portops.cache_info()
        print(worst >> 20, info.hits + info.misses, info.max_bytes >> 20)
        """
    )
    assert out.returncode == 0, out.stderr
    worst_mb, calls, bound_mb = map(int, out.stdout.split())
    assert calls == 1000 and bound_mb == 64
    # The allocator's own heap (freed uncached results) may keep a few MiB resident.
    assert worst_mb <= bound_mb + 16, f"{worst_mb} MiB resident above bound + live results"


def test_least_recently_used_free_buffers_are_evicted():
    previous = portops.set_cache_limit(40 << 20)
    try:
        portops.clear_cache()
        many = [np.ones((256, 1027 + 64 * k), np.float32) for k in range(12)]
        for y in many:  # fill the cache with shapes no longer used
            portops.shift_sum_adjoint(y, 1, channels=4)
        assert portops.cache_info().held_bytes <= 40 << 20
        working = many[:3]  # 4 + 4.25 + 4.5 MiB: fits beside nothing else
        for y in working:
            portops.shift_sum_adjoint(y, 1, channels=4)
        before = portops.cache_info()
        for _ in range(5):
            for y in working:
                r = portops.shift_sum_adjoint(y, 1, channels=4)
                assert np.all(r == 1)
                del r
        after = portops.cache_info()
        assert after.hits - before.hits == 15 and after.misses == before.misses
    finally:
        portops.set_cache_limit(previous)


@needs_proc
def test_distinct_result_shapes_leave_no_memory_behind():
    """40 distinct 40 MB result shapes, each dropped after use: the process does not
    keep them (sizes are cached only when they recur)."""
    out = _run_python(
        """
        import os
        import numpy as np
        import portops

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        portops.shift_sum_adjoint(np.ones((4, 7), np.float32), 1, channels=4)  # imports
        base = rss()
        for k in range(40):
            y = np.ones((2500, 1027 + 16 * k), np.float32)  # results of 40-42 MB
            r = portops.shift_sum_adjoint(y, 1, channels=4)
            del y, r
        print((rss() - base) >> 20, portops.cache_info().held_bytes >> 20)
        """
    )
    assert out.returncode == 0, out.stderr
    grown, held = map(int, out.stdout.split())
    assert held == 0 and grown <= 64, f"{grown} MiB kept after the calls ({held} MiB held)"


@needs_proc
def test_clear_cache_and_a_lower_limit_return_memory():
    out = _run_python(
        """
        import os
        import numpy as np
        import portops

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        y = np.ones((256, 1027), np.float32)
        sizes = [np.ones((256, 1027 + 256 * k), np.float32) for k in range(8)]
        portops.shift_sum_adjoint(y[:4], 1, channels=4)
        base = rss()
        for s in sizes + sizes:  # each size twice: cached from its second call
            portops.shift_sum_adjoint(s, 1, channels=4)
        full = rss() - base
        portops.set_cache_limit(8 << 20)
        lowered = rss() - base
        held_lowered = portops.cache_info().held_bytes
        portops.clear_cache()
        cleared = rss() - base
        print(full >> 20, lowered >> 20, held_lowered >> 20, cleared >> 20,
              portops.cache_info().buffers)
        """
    )
    assert out.returncode == 0, out.stderr
    full, lowered, held_lowered, cleared, buffers = map(int, out.stdout.split())
    assert full >= 40  # 8 results of 4-11 MiB were cached
    # The allocator's own heap (the sizes' first, uncached results) may keep some MiB.
    assert held_lowered <= 8 and lowered <= 8 + 16
    assert cleared <= 16 and buffers == 0


def test_cache_info_counts_buffers_in_use():
    portops.clear_cache()
    assert rw.holds(rw.constant_result(0.0), 0.0)  # the size's first call: not cached yet
    a = rw.constant_result(1.0)
    info = portops.cache_info()
    assert info.buffers == 1 and info.in_use == 1 and info.held_bytes == a.nbytes
    del a
    assert portops.cache_info().in_use == 0
    b = rw.constant_result(2.0)
    assert portops.cache_info().hits == info.hits + 1 and rw.holds(b, 2.0)


def test_helpers_queued_behind_other_work_keep_no_result_alive():
    """A threaded call whose helpers wait in the pool's queue (its threads busy with other
    work) returns, and its result, once dropped, frees its buffer at once."""
    x = np.ones((32, 28, 128, 256), np.float32)  # y: 5 MB, a cached buffer from its 2nd call
    with portops.threads(2):
        for _ in range(3):
            portops.shift_sum(x, 2)
        assert portops.explain("shift_sum", x, 2).threads == 2
        gate = threading.Event()
        pool = _threads._executor(1)
        blockers = [pool.submit(gate.wait) for _ in range(4)]
        try:
            y = portops.shift_sum(x, 2)
            assert portops.cache_info().in_use == 1
            np.testing.assert_array_equal(y[0, 0, :2], [1.0, 1.0])
            del y
            assert portops.cache_info().in_use == 0
        finally:
            gate.set()
            for blocker in blockers:
                blocker.result()


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (1.5, TypeError), ("64", TypeError), (True, TypeError)]
)
def test_set_cache_limit_rejects_bad_values(value, error):
    with pytest.raises(error, match="max_bytes"):
        portops.set_cache_limit(value)


@pytest.mark.parametrize("raw", ["abc", "1.5x", "-3", "nan", ""])
def test_malformed_cache_variable_warns_and_calls_still_work(raw):
    out = _run_python(
        """
        import warnings
        warnings.simplefilter("always")
        import numpy as np
        import portops
        r = portops.shift_sum_adjoint(np.ones((256, 1027), np.float32), 1, channels=4)
        print(int(r.sum()), portops.cache_info().max_bytes >> 20)
        """,
        PORTOPS_BUFFER_CACHE_MB=raw,
    )
    assert out.returncode == 0, out.stderr
    default = min(256, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 64 >> 20)
    assert out.stdout.split() == [str(4 * 256 * 1024), str(default)]
    if raw:
        assert "PORTOPS_BUFFER_CACHE_MB" in out.stderr and repr(raw) in out.stderr
    else:
        assert "PORTOPS_BUFFER_CACHE_MB" not in out.stderr


@pytest.mark.parametrize(("raw", "mb"), [("0", 0), ("0.5", 0), ("64", 64)])
def test_cache_variable_sets_the_bound(raw, mb):
    out = _run_python(
        "import portops; print(portops.cache_info().max_bytes)", PORTOPS_BUFFER_CACHE_MB=raw
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == int(float(raw) * (1 << 20)) and int(out.stdout) >> 20 == mb


# -- threads --------------------------------------------------------------------------

BIG = np.ones((16, 8, 256, 256), np.float32)  # 8.4M elements: the threaded NumPy forward


def _forward_peak(n_callers: int = 1) -> int:
    _threads.peak_threads(reset=True)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            y = portops.shift_sum(BIG, 2)
            assert y.shape == (16, 256, 270) and float(y[0, 0, 20]) == 8.0
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    if n_callers == 1:  # in this thread, where a threads() context applies
        call()
        assert not errors, errors
        return _threads.peak_threads()
    callers = [threading.Thread(target=call) for _ in range(n_callers)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not errors, errors
    return _threads.peak_threads()


def test_thread_limits_are_honoured():
    with portops.threads(1):
        started = _threads.helpers_started()
        assert portops.get_num_threads() == 1 and _forward_peak() <= 1
        assert _threads.helpers_started() == started
    for n in (2, 3):
        with portops.threads(n):
            assert _forward_peak() <= n
    previous = portops.set_num_threads(1)
    try:
        assert portops.get_num_threads() == 1 and _forward_peak() <= 1
        with portops.threads(2):
            assert portops.get_num_threads() == 2
    finally:
        portops.set_num_threads(previous)


def test_calls_from_several_threads_do_not_oversubscribe():
    # A threads() limit applies to its own thread only: set the limit process-wide.
    previous = portops.set_num_threads(2)
    try:
        # Callers are never held back; a helper joins only while fewer than 2 threads are
        # at work, so three callers reach at most 3 + 1 (a helper that joined the first
        # caller before the others arrived), never 3 + 3.
        assert _forward_peak(n_callers=3) <= 3 + (2 - 1)
        assert _forward_peak(n_callers=1) <= 2
    finally:
        portops.set_num_threads(previous)


def test_threads_context_is_per_thread():
    seen: list[int] = []
    with portops.threads(1):
        t = threading.Thread(target=lambda: seen.append(portops.get_num_threads()))
        t.start()
        t.join()
        assert portops.get_num_threads() == 1
    assert seen == [portops.get_num_threads()]


def test_threadpoolctl_limits_are_honoured():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(limits=1):
        if _threads._blas_limit() is None:
            pytest.skip("NumPy's BLAS is not visible to threadpoolctl here")
        assert _threads.effective_threads() == 1
        assert _forward_peak() <= 1


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_thread_settings_reject_bad_values(value, error):
    with pytest.raises(error, match="n must be a positive integer"):
        portops.set_num_threads(value)
    with pytest.raises(error, match="n must be a positive integer"):
        with portops.threads(value):
            pass


@pytest.mark.parametrize(("raw", "expected"), [("1", "1"), ("3", "3"), ("abc", None), ("0", None)])
def test_thread_variable(raw, expected):
    out = _run_python(
        """
        import os, warnings
        warnings.simplefilter("always")
        import numpy as np
        import portops
        from portops import _threads
        y = portops.shift_sum(np.ones((16, 8, 256, 256), np.float32), 2)
        print(portops.get_num_threads(), _threads.available_cores(), float(y[0, 0, 20]))
        """,
        PORTOPS_NUM_THREADS=raw,
    )
    assert out.returncode == 0, out.stderr
    n, cores, value = out.stdout.split()
    assert n == (expected or cores) and value == "8.0"
    assert ("PORTOPS_NUM_THREADS" in out.stderr) == (expected is None)


@needs_fork
def test_fork_child_gets_a_working_pool():
    with portops.threads(2):
        parent = portops.shift_sum(BIG, 2)  # the pool has started
    ctx = mp.get_context("fork")
    report = ctx.Queue()

    def child() -> None:
        with portops.threads(2):
            y = portops.shift_sum(BIG, 2)
        report.put(bool(np.array_equal(y, parent)))

    p = ctx.Process(target=child)
    p.start()
    assert report.get(timeout=TIMEOUT) is True
    p.join(TIMEOUT)
    assert p.exitcode == 0


# -- bad input: a property-based sweep over every public function --------------------


class Raw:
    """An argument passed as is (not converted to the backend's array type)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Raw({self.value!r})"


class Foreign:
    """A NumPy array passed as an array of another library than the backend's."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Foreign{self.value.shape}"


def _a(shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    n = int(np.prod(shape))
    values = (np.arange(n) % 7 + 1).reshape(shape)
    if np.dtype(dtype).kind == "c":
        return (values + 0.5j).astype(dtype)
    if np.dtype(dtype).kind in "mMU":
        return values.astype("int64").astype(dtype)
    return values.astype(dtype)


COMMON_BAD = [Raw(None), Raw([[1.0, 2.0]]), Raw("x"), Raw(3.0)]
BAD_INTS = [Raw(None), Raw(True), Raw(1.5), Raw("1"), Raw([1])]

# op -> (positional argument names, base arguments, {argument: alternatives})
SHIFT_X = {
    "x": [
        *COMMON_BAD,
        _a(()),
        _a((5,)),
        _a((2, 0, 4, 5)),
        _a((2, 3, 4, 0)),
        _a((3, 4, 5)),
        _a((2, 3, 1, 5)),
        _a((2, 3, 4, 5), np.int32),
        _a((2, 3, 4, 5), np.uint16),
        _a((2, 3, 4, 5), np.float32),
        _a((2, 3, 4, 5), np.float16),
        _a((2, 3, 4, 5), np.complex128),
        _a((2, 3, 4, 5), bool),
        _a((2, 3, 4, 5), "m8[s]"),
        _a((2, 3, 4, 5), "U1"),
    ],
    "step": [
        *BAD_INTS,
        Raw([]),
        Raw([0, 1]),
        Raw([0, 1.5, 2]),
        Raw(10**18),
        Raw(-1),
        Raw(0),
        Raw([2, 0, 1]),
        Raw(np.int64(2)),
        Raw(np.array([0, 3, 1])),
    ],
    "axis": [*BAD_INTS, Raw(4), Raw(-5), Raw(-3), Raw(0), Raw(-2)],
    "channel_axis": [*BAD_INTS, Raw(4), Raw(-1), Raw(0), Raw(2)],
    "mask": [
        Raw([[1.0]]),
        Raw("m"),
        _a((3, 5)),
        _a((0, 5)),
        _a((1, 2, 3, 4, 5)),
        _a((4, 5), bool),
        _a((4, 5), np.int64),
        _a((4, 5), np.complex64),
        _a((3, 1, 5)),
        _a((4, 5), "m8[s]"),
        _a((4, 5), "U1"),
        Foreign(_a((4, 5))),
    ],
    "keepdims": [Raw(True), Raw(None), Raw(np.ones(2)), Raw(1)],
}
SHIFT_Y = {
    "y": [
        *COMMON_BAD,
        _a(()),
        _a((7,)),
        _a((2, 4, 1)),
        _a((2, 0, 7)),
        _a((4, 7)),
        _a((2, 4, 7), np.int32),
        _a((2, 4, 7), np.uint32),
        _a((2, 4, 7), np.float32),
        _a((2, 4, 7), np.complex64),
        _a((2, 4, 7), bool),
        _a((2, 4, 7), "m8[s]"),
    ],
    "step": [*BAD_INTS, Raw([]), Raw([0, 1]), Raw([0, 2, 1]), Raw(7), Raw(0), Raw(-1)],
    "channels": [*BAD_INTS, Raw(0), Raw(-1), Raw(2), Raw(10**9), Raw(10**18)],
    "axis": [*BAD_INTS, Raw(3), Raw(-4), Raw(-3), Raw(-2)],
    "channel_axis": [*BAD_INTS, Raw(3), Raw(-1), Raw(0), Raw(2)],
    "mask": SHIFT_X["mask"],
    "keepdims": [Raw(True), Raw(np.ones(2))],
}
VECDOT = {
    "x1": [*COMMON_BAD, _a(()), _a((3, 5)), _a((4,)), _a((3, 4), bool), _a((3, 4), "U1")],
    "x2": [*COMMON_BAD, _a((2, 3, 4)), _a((3, 4), np.complex128), _a((3, 4), np.int8)],
    "axis": [*BAD_INTS, Raw(2), Raw(-3), Raw(0)],
    "keepdims": [Raw(True), Raw(np.ones(2))],
}
EINSUM = {
    "subscripts": [
        Raw(None),
        Raw(1),
        Raw("ij->k"),
        Raw("ij,jk,kl->il"),
        Raw("ij,jk->ikk"),
        Raw("ij,jk->ik->i"),
        Raw("i$,jk->ik"),
        Raw("ij,jk"),
        Raw("ij,kl->ijkl"),
    ],
    "operand 0": [*COMMON_BAD, _a((3, 3)), _a((2, 3), bool), _a((2, 3), np.complex64)],
    "operand 1": [*COMMON_BAD, _a((2, 3, 4)), _a((1, 4)), Foreign(_a((3, 4)))],
    "optimize": [Raw("bogus"), Raw(5), Raw(True), Raw(False), Raw("greedy"), Raw(None)],
    "memory_limit": [Raw(-1), Raw("x"), Raw(1.5), Raw(True), Raw(10), Raw(None)],
}

OPS: dict[str, tuple[Any, dict[str, Any], dict[str, list[Any]]]] = {
    "shift_sum": (
        portops.shift_sum,
        {"x": _a((2, 3, 4, 5)), "step": Raw(1), "mask": _a((4, 5))},
        SHIFT_X,
    ),
    "shift_sum_adjoint": (
        portops.shift_sum_adjoint,
        {"y": _a((2, 4, 7)), "step": Raw(1), "channels": Raw(3), "mask": _a((4, 5))},
        SHIFT_Y,
    ),
    "shift_sum_pinv": (
        portops.shift_sum_pinv,
        {"y": _a((2, 4, 7)), "step": Raw(1), "channels": Raw(3), "mask": _a((4, 5))},
        SHIFT_Y,
    ),
    "vecdot": (portops.vecdot, {"x1": _a((3, 4)), "x2": _a((3, 4))}, VECDOT),
    "einsum": (
        portops.einsum,
        {"subscripts": Raw("ij,jk->ik"), "operand 0": _a((2, 3)), "operand 1": _a((3, 4))},
        EINSUM,
    ),
    "einsum_path": (
        portops.einsum_path,
        {"subscripts": Raw("ij,jk->ik"), "operand 0": _a((2, 3)), "operand 1": _a((3, 4))},
        EINSUM,
    ),
}
POSITIONAL = ("subscripts", "operand 0", "operand 1", "x", "y", "x1", "x2", "step")


def _foreign_for(backend: Any, a: np.ndarray) -> Any:
    if backend.library != "numpy":
        return a.copy()
    import array_api_strict

    return array_api_strict.asarray(a)


def _convert(backend: Any, value: Any) -> Any:
    if isinstance(value, Raw):
        return value.value
    if isinstance(value, Foreign):
        return _foreign_for(backend, value.value)
    return backend.asarray(value)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, (Raw, Foreign)) else value


def _reference(op: str, kw: dict[str, Any]) -> Any:
    """The expected result, computed with plain NumPy loops; raises when there is none."""
    from shift_sum_reference import adjoint, dense_matrix, forward

    if op in ("einsum", "einsum_path"):
        return np.einsum(kw["subscripts"], kw["operand 0"], kw["operand 1"])
    if op == "vecdot":
        x1, x2 = kw["x1"], kw["x2"]
        axis = kw.get("axis", -1)
        return np.sum(np.conj(x1) * x2, axis=axis, keepdims=bool(kw.get("keepdims", False)))
    if op == "shift_sum":
        args = {k: v for k, v in kw.items() if k not in ("x", "step")}
        return forward(kw["x"], _steps(kw["step"]), **args)
    args = {k: v for k, v in kw.items() if k not in ("y", "step")}
    if op == "shift_sum_adjoint":
        return adjoint(kw["y"], _steps(kw["step"]), **args)
    # The pseudo-inverse from the dense matrix, on the x layout.
    y = np.asarray(kw["y"])
    axis, cax = args.get("axis", -1), args.get("channel_axis", -3)
    keep = bool(args.get("keepdims", False))
    ndim = y.ndim if keep else y.ndim + 1
    offsets_y = np.expand_dims(y, cax % ndim) if not keep else y
    step = _steps(kw["step"])
    zero = adjoint(offsets_y if keep else y, step, **args)  # the result's shape
    m = dense_matrix(zero.shape, step, axis=axis, channel_axis=cax, mask=args.get("mask"))
    return (np.linalg.pinv(m) @ y.reshape(-1)).reshape(zero.shape)


def _steps(step: Any) -> Any:
    return np.asarray(step).tolist()  # an int, or a list of ints


ARGUMENT_WORDS = re.compile(
    r"\b(x|y|x1|x2|mask|step|channels|axis|channel_axis|keepdims|subscripts|operands?"
    r"|optimize|memory_limit|label|term)\b"
)


def _names_argument(op: str, arg: str, exc: Exception) -> bool:
    """Whether the message names `arg`; a ValueError may name another argument that
    `arg`'s value conflicts with (a mask that no longer fits the new width, say)."""
    message = str(exc)
    own = [arg.split()[0]] if arg.startswith("operand") else [arg]
    if op.startswith("einsum") and arg == "subscripts":
        own += ["label", "term", "operand", "->"]
    if any(re.search(rf"\b{re.escape(n)}\b", message) for n in own):
        return True
    return isinstance(exc, ValueError) and ARGUMENT_WORDS.search(message) is not None


def _check_outcome(backend: Any, op: str, arg: str, kw: dict[str, Any]) -> str:
    func, _, _ = OPS[op]
    call_kw = {k: _convert(backend, v) for k, v in kw.items()}
    positional = [call_kw.pop(k) for k in POSITIONAL if k in call_kw]
    try:
        result = func(*positional, **call_kw)
    except (TypeError, ValueError) as exc:
        assert _names_argument(op, arg, exc), f"{op}({arg}=...): {exc!r} does not name it"
        return "error"
    except NotImplementedError as exc:
        dtypes = {str(getattr(v, "dtype", "")) for v in call_kw.values()} | {
            str(getattr(v, "dtype", "")) for v in positional
        }
        assert any(d and d in str(exc) for d in dtypes), f"{op}: {exc!r} names no dtype"
        return "not implemented"
    plain = {k: _plain(v) for k, v in kw.items()}
    if op == "einsum_path":
        assert result[0][0] == "einsum_path" and result[1].equation in str(result[1])
        return "result"
    try:
        expected = _reference(op, plain)
    except Exception as exc:
        raise AssertionError(
            f"{op}({arg}=...) returned a result where the reference raised {exc!r}"
        ) from exc
    got = backend.to_numpy(result)
    assert got.shape == np.shape(expected), f"{op}({arg}): shape {got.shape} != {expected.shape}"
    if got.size:
        tol = 2e-2 if got.dtype.itemsize <= 2 or got.dtype == np.complex64 else 1e-6
        np.testing.assert_allclose(
            got.astype(np.complex128),
            np.asarray(expected).astype(np.complex128),
            rtol=tol,
            atol=tol,
        )
    return "result"


@pytest.mark.parametrize("op", list(OPS))
@settings(
    max_examples=int(os.environ.get("PORTOPS_SWEEP_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_bad_input_sweep(backend, op, data):
    _, base, alternatives = OPS[op]
    arg = data.draw(st.sampled_from(sorted(alternatives)), label="argument")
    value = data.draw(st.sampled_from(alternatives[arg]), label=arg)
    kw = {**base, arg: value}
    try:
        _convert_all = [_convert(backend, v) for v in kw.values()]
    except Exception:
        assume(False)  # this backend cannot hold such an array (str, datetime, ...)
    del _convert_all
    _check_outcome(backend, op, arg, kw)


# -- the edge cases and errors found, one by one --------------------------------------


def test_pinv_of_zero_width_keeps_the_zero_width(backend):
    y = backend.asarray(np.ones((2, 4, 1)))
    mask = backend.asarray(np.ones((4, 1)))
    for op in (portops.shift_sum_pinv, portops.shift_sum_adjoint):
        x = op(y, 1, channels=2, mask=mask)
        backend.check_type(x)
        assert tuple(x.shape) == (2, 2, 4, 0)


def test_mask_with_a_zero_size_dimension(backend):
    mask = backend.asarray(np.ones((2, 0, 5)))
    x = portops.shift_sum_pinv(backend.asarray(np.ones((0, 6))), 1, channels=2, mask=mask)
    assert tuple(x.shape) == (2, 0, 5)
    y = portops.shift_sum(backend.asarray(np.ones((2, 0, 5))), 1, mask=mask)
    assert tuple(y.shape) == (0, 6)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: portops.shift_sum_adjoint(np.ones((2, 4, 5)), 1, channels=10**9),
            ValueError,
            "y is too narrow.*1000000000 channels",
        ),
        (
            lambda: portops.shift_sum_pinv(np.ones((2, 4, 5)), -3, channels=10**9),
            ValueError,
            "y is too narrow",
        ),
        (
            lambda: portops.shift_sum_adjoint(np.ones((2, 4, 5)), 0, channels=10**18),
            ValueError,
            "channels=1000000000000000000 asks for a result",
        ),
        (lambda: portops.shift_sum(np.ones((2, 3, 4, 5)), 10**18), ValueError, "step=.*result"),
        (lambda: portops.shift_sum(np.ones((0, 4, 5)), 1), ValueError, "x has no channels"),
        (lambda: portops.einsum("i,i", np.ones(3), None), TypeError, "operand 1 must be an array"),
        (lambda: portops.einsum("i,i", None, np.ones(3)), TypeError, "operand 0 must be an array"),
        (lambda: portops.einsum_path("i,i", None, np.ones(3)), TypeError, "operand 0"),
        (lambda: portops.vecdot(None, np.ones(3)), TypeError, "x1 must be an array"),
        (lambda: portops.vecdot(np.ones(3), None), TypeError, "x2 must be an array"),
        (
            lambda: portops.shift_sum(np.ones((2, 3, 4)), 1, axis=True),
            TypeError,
            "axis must be an integer, got bool",
        ),
        (
            lambda: portops.shift_sum(np.ones((2, 3, 4)), 1, channel_axis=False),
            TypeError,
            "channel_axis must be an integer, got bool",
        ),
        (
            lambda: portops.shift_sum(np.ones((2, 3, 4)), 1, keepdims=np.ones(2)),
            TypeError,
            "keepdims must be a bool",
        ),
    ],
)
def test_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_torch_unsigned_forward_is_rejected_by_name(dtype):
    torch = pytest.importorskip("torch")
    x = torch.ones((2, 3, 4), dtype=getattr(torch, dtype))
    with pytest.raises(TypeError, match=f"x has dtype torch.{dtype}"):
        portops.shift_sum(x, 1)
    y = torch.ones((3, 5), dtype=getattr(torch, dtype))  # the adjoint only copies: it works
    assert torch.equal(
        portops.shift_sum_adjoint(y, 1, channels=2).to(torch.int64),
        torch.ones((2, 3, 4), dtype=torch.int64),
    )


def test_torch_complex32_adjoint_is_rejected_by_name():
    torch = pytest.importorskip("torch")
    y = torch.ones((3, 6), dtype=torch.complex32)
    for op in (portops.shift_sum_adjoint, portops.shift_sum_pinv):
        with pytest.raises(TypeError, match=r"y has dtype torch\.complex32"):
            op(y, 1, channels=2)


def test_dask_unknown_sizes_and_timedelta_are_rejected():
    da = pytest.importorskip("dask.array")
    x = da.ones((2, 3, 4))
    unknown = x[x[:, 0, 0] > 0]
    with pytest.raises(ValueError, match=r"x has unknown sizes.*compute_chunk_sizes"):
        portops.shift_sum(unknown, 1, channel_axis=0)
    with pytest.raises(ValueError, match="y has unknown sizes"):
        portops.shift_sum_adjoint(unknown, 1, channels=2)
    td = da.from_array(np.ones((2, 3, 4)).astype("m8[s]"))
    with pytest.raises(TypeError, match=r"x must have a numeric .* got timedelta64"):
        portops.shift_sum(td, 1)
    with pytest.raises(TypeError, match="mask must have a numeric or bool dtype"):
        portops.shift_sum(x, 1, mask=td[0])
    with pytest.raises(TypeError, match="x1 must have a numeric dtype"):
        portops.vecdot(td, x)
    # Dask cannot broadcast an unknown size against a known one: the operand is named.
    rows, cols = da.ones((4, 6), chunks=2), da.ones((4, 6), chunks=2)
    rows, cols = rows[rows[:, 0] > 0], cols[:, cols[0] > 0]
    with pytest.raises(ValueError, match=r"x1 has unknown sizes \(shape \(nan, 6\)\).*x1\.comp"):
        portops.vecdot(rows, da.ones((4, 6)))
    with pytest.raises(ValueError, match=r"x2 has unknown sizes \(shape \(4, nan\)\)"):
        portops.vecdot(da.ones((4, 6)), cols)
    # Unknown sizes that meet each other, or a size 1, are Dask's to match.
    np.testing.assert_array_equal(portops.vecdot(cols, cols).compute(), np.full(4, 6.0))
    np.testing.assert_array_equal(portops.vecdot(rows, da.ones(6)).compute(), np.full(4, 6.0))


# -- the pool under concurrent calls with different thread limits ----------------------


def test_pool_growth_races_no_submission(monkeypatch):
    """Threads calling with different ``threads()`` limits grow the pool (a bigger one
    replaces it) while others submit to it: no call may fail with "cannot schedule new
    futures after shutdown". Submissions are slowed down to widen the window in which a
    replacement could shut a pool down under a caller about to submit to it."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    class SlowSubmit(ThreadPoolExecutor):
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.002)
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(_threads, "ThreadPoolExecutor", SlowSubmit)
    monkeypatch.setattr(_threads, "_pool", None)
    monkeypatch.setattr(_threads, "_pool_size", 0)
    errors: list[str] = []
    start = threading.Barrier(8)

    def caller(k: int) -> None:
        start.wait()
        time.sleep(0.0005 * k)  # smaller pools first: each caller replaces the last one's
        try:
            with portops.threads(2 + k):
                helpers = _threads.submit_helpers(lambda: None, 1 + k, 2 + k)
            for helper in helpers:
                helper.result(TIMEOUT)
        except Exception as exc:
            errors.append(repr(exc))

    callers = [threading.Thread(target=caller, args=(k,)) for k in range(8)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(TIMEOUT)
    _threads._pool.shutdown(wait=True)
    assert not errors, errors
