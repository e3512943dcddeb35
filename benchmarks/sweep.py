"""The shape sweep: portops' default against every native call of the same library.

Each sweep point is one comparison (the ``compare`` fixture, ``benchmarks/conftest.py``):
portops, each native call (and the seed baselines) in interleaved rounds. Its result is
portops' time over the best native's (the native with the lowest median), as the median
of per-round ratios. A point that misses at the lower threshold (``report.MISS_RATIOS``)
runs ``RECHECK`` times as many rounds again before it counts: on a shared 2-core machine
one call's rounds swing by 20%.

``--sweep`` runs the whole grid of every operation; without it, ``SAMPLE`` points of
each grid run (the first, the middle and the last), so that the default run shows every
operation's behaviour too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.interleave import Candidate, Interleaved
from benchmarks.report import MISS_RATIOS, MISS_SECONDS

FULL = os.environ.get("PORTOPS_BENCH_SWEEP") == "1"
QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
SAMPLE = 3
EXTRA_S = 1.5  # rounds beyond the minimum, at most, per point
RECHECK = 2  # a point that misses runs twice its rounds again


def grid(points: Sequence[Any]) -> list[Any]:
    """The whole grid under ``--sweep``; every third point under ``--quick``; else a
    sample of ``SAMPLE`` points spread over the grid."""
    if FULL:
        return list(points)
    if QUICK:
        return list(points[:: max(1, len(points) // 3)])
    last = len(points) - 1
    return [points[round(i * last / (SAMPLE - 1))] for i in range(SAMPLE)]


def best_native(rounds: Interleaved) -> str | None:
    natives = [c.name for c in rounds.candidates if c.kind == "native"]
    return min(natives, key=rounds.median) if natives else None


def misses(rounds: Interleaved, ratio: float = min(MISS_RATIOS)) -> bool:
    """Whether portops takes over `ratio` times the best native and over 3 µs more."""
    best = best_native(rounds)
    if best is None:
        return False
    t, t_best = rounds.median(rounds.portops), rounds.median(best)
    return 1 / rounds.speedup(best).median > ratio and t > t_best + MISS_SECONDS


def run_point(
    compare: Any,
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
    """Time one sweep point (see the module docstring)."""
    candidates = [Candidate("portops", "default", portops_fn)]
    candidates += [Candidate(k, "native", f) for k, f in natives.items()]
    candidates += [Candidate(k, "baseline", f) for k, f in (baselines or {}).items()]
    compare(
        candidates,
        op=op,
        case=case,
        backend=backend,
        label="sweep",
        nbytes=nbytes,
        extra_s=EXTRA_S,
        recheck=lambda r: RECHECK * r.rounds if misses(r) else 0,
        sweep=True,
        params=params,
    )
