"""First and cached einsum calls on opt_einsum's 69 ``test_contract`` equations.

Run ``python -m benchmarks.einsum_first_call``. For every equation (operands from
``opt_einsum.testing.build_views``, float64 NumPy arrays) it times, interleaved:

- portops' first call: every einsum cache emptied before each timed call;
- portops' cached call: the same call again;
- ``np.einsum(optimize=True)`` and ``opt_einsum.contract`` (neither keeps a plan, so
  every call of theirs is a first call).

Each figure is the median of ``--rounds`` rounds; the report gives per-equation times
and the geometric means of portops' first call over NumPy's and of its cached call
over the best of NumPy and opt_einsum. ``--runs N`` repeats the whole measurement and
adds the median of the runs' geometric means (on a shared machine one run can fall on
a burst of load).

``--tiny`` instead times a repeated call on tiny operands (``bchw,bchw->bc``, (1, 4, 8,
8)) against ``np.einsum`` and ``torch.einsum``: the per-call overhead.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def equations() -> list[str]:
    """opt_einsum 3.4's ``test_contract.tests`` list (shipped with its wheel)."""
    from opt_einsum.tests.test_contract import tests

    return list(dict.fromkeys(tests))  # one equation is listed twice


def _time(fn: Callable[[], Any], before: Callable[[], None] | None = None, calls: int = 3) -> float:
    """Best of `calls` timed calls in µs (`before` runs untimed before each)."""
    best = math.inf
    for _ in range(calls):
        if before is not None:
            before()
        t0 = time.perf_counter_ns()
        fn()
        best = min(best, (time.perf_counter_ns() - t0) / 1e3)
    return best


def measure(rounds: int) -> list[dict[str, Any]]:
    import opt_einsum
    from opt_einsum.testing import build_views

    import portops

    einsum_module = importlib.import_module("portops._ops.einsum")
    rows = []
    for eq in equations():
        views = build_views(eq)
        np.einsum(eq, *views, optimize=True)  # warm numpy's own code paths
        opt_einsum.contract(eq, *views)
        samples: dict[str, list[float]] = {"first": [], "cached": [], "numpy": [], "oe": []}
        ours = functools.partial(portops.einsum, eq, *views)
        theirs = functools.partial(np.einsum, eq, *views, optimize=True)
        oe = functools.partial(opt_einsum.contract, eq, *views)
        for _ in range(rounds):
            samples["first"].append(_time(ours, before=einsum_module.clear_caches))
            ours()
            samples["cached"].append(_time(ours))
            samples["numpy"].append(_time(theirs))
            samples["oe"].append(_time(oe))
        row: dict[str, Any] = {"equation": eq}
        row.update({k: statistics.median(v) for k, v in samples.items()})
        rows.append(row)
    return rows


def _gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def ratios(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Geometric means: first call / numpy, cached call / best of numpy and opt_einsum."""
    first = _gmean([r["first"] / r["numpy"] for r in rows])
    cached = _gmean([r["cached"] / min(r["numpy"], r["oe"]) for r in rows])
    return first, cached


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'equation':<40} {'first':>9} {'cached':>9} {'numpy':>9} {'opt_einsum':>10}"
        "  first/np  cached/best"
    ]
    for r in rows:
        best = min(r["numpy"], r["oe"])
        lines.append(
            f"{r['equation']:<40} {r['first']:>9.1f} {r['cached']:>9.1f} {r['numpy']:>9.1f} "
            f"{r['oe']:>10.1f}  {r['first'] / r['numpy']:>8.2f}  {r['cached'] / best:>11.2f}"
        )
    first, cached = ratios(rows)
    med = {k: statistics.median(r[k] for r in rows) for k in ("first", "cached", "numpy", "oe")}
    lines += [
        "",
        f"{len(rows)} equations, times in µs (median over rounds of the best of 3 calls)",
        "median call: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()),
        f"geometric mean, first call / np.einsum(optimize=True): {first:.3f}",
        f"geometric mean, cached call / best of numpy and opt_einsum: {cached:.3f}",
    ]
    return "\n".join(lines)


def tiny(rounds: int, calls: int = 2000) -> str:
    """Per-call cost of a repeated ``bchw,bchw->bc`` on (1, 4, 8, 8) float64 operands:
    portops against ``np.einsum`` (NumPy) and ``torch.einsum`` (torch CPU), interleaved
    rounds of `calls` calls each, medians in µs."""
    import portops

    eq = "bchw,bchw->bc"
    rng = np.random.default_rng(0)
    a, b = rng.uniform(size=(1, 4, 8, 8)), rng.uniform(size=(1, 4, 8, 8))
    entries: dict[str, Callable[[], Any]] = {
        "np.einsum": functools.partial(np.einsum, eq, a, b),
        "portops.einsum (NumPy)": functools.partial(portops.einsum, eq, a, b),
    }
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        entries["torch.einsum"] = functools.partial(torch.einsum, eq, ta, tb)
        entries["portops.einsum (torch)"] = functools.partial(portops.einsum, eq, ta, tb)
    except ImportError:
        pass
    for fn in entries.values():
        fn(), fn()  # plan, then fill the signature cache
    samples: dict[str, list[float]] = {k: [] for k in entries}
    for _ in range(rounds):
        for name, fn in entries.items():
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) / calls / 1e3)
    med = {k: statistics.median(v) for k, v in samples.items()}
    lines = [f"{k:<24} {v:7.2f} µs" for k, v in med.items()]
    lines.append(f"portops - np.einsum: {med['portops.einsum (NumPy)'] - med['np.einsum']:+.2f} µs")
    if "torch.einsum" in med:
        lines.append(
            f"portops - torch.einsum: {med['portops.einsum (torch)'] - med['torch.einsum']:+.2f} µs"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=1, help="whole measurements to repeat")
    parser.add_argument(
        "--tiny", action="store_true", help="per-call cost on tiny operands instead"
    )
    args = parser.parse_args()
    if args.tiny:
        print(tiny(max(args.rounds, 15)))
        return
    results = []
    for _ in range(max(1, args.runs)):
        rows = measure(args.rounds)
        print(report(rows), end="\n\n")
        results.append(ratios(rows))
    if len(results) > 1:
        first = statistics.median(r[0] for r in results)
        cached = statistics.median(r[1] for r in results)
        runs = ", ".join(f"{f:.3f}/{c:.3f}" for f, c in results)
        print(f"median of {len(results)} runs (first/numpy, cached/best per run: {runs}):")
        print(f"  first call / np.einsum(optimize=True): {first:.3f}")
        print(f"  cached call / best of numpy and opt_einsum: {cached:.3f}")


if __name__ == "__main__":
    main()
