"""The shape sweep: portops' default against the best native call, point by point.

Each sweep point is one benchmark: pytest-benchmark times ``calls`` back-to-back
portops calls per round, and before every round the setup times each native call
(and each seed baseline) the same way, in an order shuffled from round to round (the
same shuffles in every run), each after one untimed call (see ``_warm_time``).
So every candidate sees the machine in the same state, which on a shared host drifts
within seconds. Per-call medians of the natives and baselines land in ``extra_info``
(``native``, ``baseline``: name -> seconds per call); the report divides portops'
round median by ``calls``.

``--sweep`` runs the whole grid of every operation; without it a slice of each grid
runs (``SLICE``), so that the default run shows every operation's behaviour too.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from benchmarks.report import MISS_RATIO, MISS_SECONDS, RERUN_ROUNDS

FULL = os.environ.get("PORTOPS_BENCH_SWEEP") == "1"
# pytest-benchmark's --benchmark-disable-gc turns the collector off while it times
# portops; the natives' timings here (the setup, a re-run) then go without it too.
NO_GC = os.environ.get("PORTOPS_BENCH_NO_GC") == "1"
QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
ROUNDS = 2 if QUICK else 7
ROUND_TIME = 1e-3  # seconds of calls per candidate and round, at least
# A candidate this much slower than portops, and slower than SLOW_S, runs once per
# round (it cannot be the best native call).
HOPELESS = 20.0
SLOW_S = 0.02


def grid(points: Sequence[Any]) -> list[Any]:
    """The whole grid under ``--sweep``; else every seventh point (the first, the last)."""
    if FULL or QUICK:
        return list(points) if not QUICK else list(points[:: max(1, len(points) // 3)])
    picked = list(points[::7])
    return picked if points[-1] in picked else [*picked, points[-1]]


def _time(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The garbage collector off (under NO_GC) while the sweep times calls itself."""
    enabled = gc.isenabled()
    if NO_GC:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _warm_time(fn: Callable[[], Any], calls: int) -> float:
    """`_time` after one untimed call when a round has several: the first call after
    another candidate's pays for the state it left (evicted caches, torch's threads
    asleep after NumPy's calls), which is no property of this candidate."""
    if calls > 1:
        fn()
    return _time(fn, calls)


def _calls_for(seconds: float) -> int:
    """Calls per round: ROUND_TIME's worth, and at least two below SLOW_S, so that a
    round of a call of a millisecond or more is still an untimed call and two timed
    ones (a single call after another candidate's pays for the state it left: page
    faults of a fresh heap, threads asleep)."""
    if seconds >= SLOW_S:
        return 1
    return max(2, min(10_000, math.ceil(ROUND_TIME / max(seconds, 1e-8))))


def run_point(
    bench: Any,
    portops_fn: Callable[[], Any],
    natives: dict[str, Callable[[], Any]],
    baselines: dict[str, Callable[[], Any]] | None = None,
    *,
    op: str,
    backend: str,
    case: str,
    params: dict[str, Any],
    nbytes: int = 0,
) -> None:
    """Time one sweep point (see the module docstring) and describe it in extra_info."""
    others = {("native", k): f for k, f in natives.items()}
    others.update({("baseline", k): f for k, f in (baselines or {}).items()})
    portops_fn()  # first calls: caches, plans, page faults
    single = {key: _time(f, 1) for key, f in others.items()}
    t_portops = min(_time(portops_fn, 1), _time(portops_fn, 1))
    calls = {
        key: 1 if t > HOPELESS * t_portops and t > SLOW_S else _calls_for(min(t, _time(f, 1)))
        for (key, f), t in zip(others.items(), single.values(), strict=True)
    }
    portops_calls = _calls_for(t_portops)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in others}
    order = list(others)
    shuffle = random.Random(f"{op} {backend} {case}").shuffle  # the same order every run

    def setup() -> None:
        shuffle(order)
        with _collector_paused():
            for key in order:
                times[key].append(_warm_time(others[key], calls[key]))
        if portops_calls > 1:  # its first call, untimed (see _warm_time)
            portops_fn()

    benchmark = bench(
        lambda: _time(portops_fn, portops_calls),
        **{"op": op, "case": case, "backend": backend, "device": "cpu", "kind": "default"},
        name="portops",
        setup=setup,
        rounds=ROUNDS,
        sweep=True,
        calls=portops_calls,
        params=params,
        bytes=nbytes,
    )
    medians = {key: statistics.median(v[1:] or v) for key, v in times.items()}  # not warm-up
    benchmark.extra_info.update(
        native={k: t for (kind, k), t in medians.items() if kind == "native"},
        baseline={k: t for (kind, k), t in medians.items() if kind == "baseline"},
    )
    if not natives or benchmark.stats is None:
        return
    t = benchmark.stats.stats.median / portops_calls
    best = min(benchmark.extra_info["native"].values())
    if t > max(MISS_RATIO * best, best + MISS_SECONDS):
        # Once more, portops now among the natives in a shuffled order, so that each
        # candidate follows each other one (some leave the machine in a state that
        # slows the next: torch's threads asleep after NumPy's calls, say).
        fns = {"portops": (portops_fn, portops_calls)}
        fns.update({k: (others[kind, k], calls[kind, k]) for kind, k in others if kind == "native"})
        rerun: dict[str, list[float]] = {k: [] for k in fns}
        names = list(fns)
        # RERUN_ROUNDS times as many rounds as a time budget allowed the point.
        for _ in range(RERUN_ROUNDS * benchmark.stats.stats.rounds):
            shuffle(names)
            with _collector_paused():
                for k in names:
                    rerun[k].append(_warm_time(*fns[k]))
        benchmark.extra_info["rerun"] = {k: statistics.median(v) for k, v in rerun.items()}
