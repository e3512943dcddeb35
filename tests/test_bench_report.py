"""The benchmark tooling on fabricated data (no timing is asserted): the statistics of
per-round ratios (benchmarks/ratios.py), the interleaved rounds with a fake clock
(benchmarks/interleave.py), the report, README table, chart and docs page from a
synthetic pytest-benchmark JSON, and the conftest's fixture on a toy benchmark file."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from backends import pythonpath

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import interleave, ratios, report  # noqa: E402

# ------------------------------------------------------------------ statistics


def test_threads_leave_out_busy_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import conftest as bench_conftest

    assert 0 <= bench_conftest.busy_cores(0.05) <= (os.cpu_count() or 1)
    monkeypatch.setattr(bench_conftest, "usable_cores", lambda: 2)
    monkeypatch.setattr(bench_conftest.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench_conftest, "busy_cores", lambda: 1.02)  # one other process
    assert bench_conftest.choose_threads("auto") == (1, 1.02)
    monkeypatch.setattr(bench_conftest, "busy_cores", lambda: 0.3)
    assert bench_conftest.choose_threads("auto") == (2, 0.3)
    monkeypatch.setattr(bench_conftest, "busy_cores", lambda: 5.0)
    assert bench_conftest.choose_threads("auto") == (1, 5.0)
    assert bench_conftest.choose_threads("all") == (2, None)
    assert bench_conftest.choose_threads("8") == (2, None)


@pytest.mark.parametrize(("n", "ranks"), [(3, (0, 2)), (5, (0, 4)), (6, (0, 5)), (10, (1, 8))])
def test_median_interval_ranks(n: int, ranks: tuple[int, int]) -> None:
    """The sign-test interval: the extremes below 6 values, then order statistics."""
    assert ratios.interval_ranks(n) == ranks


def test_interval_ranks_cover_95_percent() -> None:
    from math import comb

    for n in range(6, 200):
        lo, hi = ratios.interval_ranks(n)
        outside = 2 * sum(comb(n, k) for k in range(lo + 1)) / 2**n  # below x_lo or above x_hi
        assert outside <= 0.05 and lo <= hi
        wider = 2 * sum(comb(n, k) for k in range(lo + 2)) / 2**n
        assert wider > 0.05  # the narrowest such interval


def test_summarize_spread_and_noisy() -> None:
    r = ratios.summarize([1.0, 1.02, 0.98, 1.01, 0.99, 1.0])
    assert (r.median, r.low, r.high, r.rounds) == (1.0, 0.98, 1.02, 6)
    assert r.spread == pytest.approx(1 / 0.98 - 1) and not r.noisy
    wide = ratios.per_round([2.0, 3.0, 2.0, 2.5, 2.0], [1.0] * 5)
    assert wide.median == 2.0 and wide.high == 3.0 and wide.noisy
    assert ratios.summarize([]).rounds == 0


# ------------------------------------------------------------------ interleaved rounds


class FakeClock:
    """Seconds per call for each candidate, from an iterator per function."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, times: dict[Any, Any]) -> None:
        self.times = {fn: iter(ts) for fn, ts in times.items()}
        self.order: list[Any] = []
        monkeypatch.setattr(interleave, "_timed", self.timed)

    def timed(self, fn: Any, calls: int) -> float:
        self.order.append(fn)
        return next(self.times[fn])


def candidates(*kinds: str) -> list[interleave.Candidate]:
    return [interleave.Candidate(f"c{i}", k, lambda: None) for i, k in enumerate(kinds)]


def test_rounds_stop_once_tight(monkeypatch: pytest.MonkeyPatch) -> None:
    cs = candidates("default", "baseline", "native", "copy")
    FakeClock(monkeypatch, {c.fn: itertools.repeat(1e-3 * (i + 1)) for i, c in enumerate(cs)})
    rounds = interleave.Interleaved(cs, seed="s")
    rounds.run(min_rounds=5, seconds=60.0)
    assert rounds.rounds == 5 and all(len(t) == 5 for t in rounds.times.values())
    assert rounds.calls == {"c0": 1, "c1": 1, "c2": 1, "c3": 1}  # 1 ms of calls per batch
    assert rounds.speedup("c1").median == pytest.approx(2.0)
    assert rounds.compared() == ["c1", "c2"] and rounds.noisy() == []


def test_rounds_go_on_while_noisy_and_order_is_shuffled(monkeypatch: pytest.MonkeyPatch) -> None:
    cs = candidates("default", "baseline", "native", "native", "baseline")

    def swings(fast: float, slow: float) -> Any:
        """One value for the calibration, then turns (of three batches) at either speed."""
        return itertools.chain([fast], itertools.cycle([fast] * 3 + [slow] * 3))

    times = {cs[0].fn: itertools.repeat(1e-3), cs[1].fn: swings(1e-3, 3e-3)}
    times |= {cs[2].fn: itertools.repeat(5e-3), cs[3].fn: swings(6e-3, 18e-3)}
    times |= {cs[4].fn: swings(20e-3, 60e-3)}  # 20-60x slower: decided, but fast: refined
    clock = FakeClock(monkeypatch, times)
    rounds = interleave.Interleaved(cs, seed="s")
    rounds.run(min_rounds=5, seconds=60.0, max_rounds=12)
    assert rounds.rounds == 12 and rounds.noisy() == ["c1", "c4"]  # c3: not the best native
    # After the first five rounds, only portops and the ratio waited on are timed.
    assert None not in rounds.times["c4"] and rounds.speedup("c4").decided
    assert rounds.times["c2"][5:] == [None] * 7 and None not in rounds.times["c1"]
    turns = [fn for i, fn in enumerate(clock.order[5:]) if i % interleave.BATCHES == 0]
    orders = {tuple(turns[5 * i : 5 * i + 5]) for i in range(5)}
    assert len(orders) > 1 and all(len(set(o)) == 5 for o in orders)  # shuffled each round
    again = FakeClock(monkeypatch, times)
    interleave.Interleaved(cs, seed="s").run(min_rounds=5, seconds=0.0)
    assert clock.order[: len(again.order)] == again.order  # the same shuffles in every run


def test_a_slow_candidates_decided_ratio_is_not_refined(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed method of 0.2-0.6 s a call, 200-600x slower: more rounds would spend the
    budget on a digit of a settled ratio."""
    cs = candidates("default", "baseline")
    slow = itertools.chain([0.2], itertools.cycle([0.2, 0.6]))
    FakeClock(monkeypatch, {cs[0].fn: itertools.repeat(1e-3), cs[1].fn: slow})
    rounds = interleave.Interleaved(cs, seed="s")
    rounds.run(min_rounds=5, seconds=60.0, max_rounds=12)
    assert rounds.rounds == 5 and rounds.noisy() == ["c1"] and rounds.speedup("c1").decided


def test_a_later_visit_widens_the_interval_of_a_state_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A baseline 2x slower in the first visit and 3x slower in the later ones (the
    machine changed in between): the rounds of every visit count, so the ratio comes out
    noisy instead of a tight 2x. A slow candidate already settled sits the visits out."""
    cs = candidates("default", "baseline", "baseline")
    changed = itertools.chain([2e-3] * 16, itertools.repeat(3e-3))  # calibration + 5 turns
    slow = itertools.repeat(0.5)
    FakeClock(monkeypatch, {cs[0].fn: itertools.repeat(1e-3), cs[1].fn: changed, cs[2].fn: slow})
    rounds = interleave.Interleaved(cs, seed="s")
    rounds.run(min_rounds=5, seconds=0.0)
    assert rounds.speedup("c1").median == pytest.approx(2.0) and not rounds.speedup("c1").noisy
    rounds.revisit(3)
    rounds.revisit(3)
    assert rounds.visits == [0, 5, 8] and rounds.rounds == 11
    assert rounds.speedup("c1").noisy and rounds.speedup("c1").high == pytest.approx(3.0)
    # 500x slower, settled: timed in the first round of each visit only
    assert [t is None for t in rounds.times["c2"][5:]] == [False, True, True] * 2
    assert None not in rounds.times["c0"] and None not in rounds.times["c1"]
    assert rounds.waiting() == ["c1"]  # noisy, fast: further visits time it (and portops)
    rounds.revisit(2, waiting_only=True)
    assert rounds.visits[-1] == 11 and rounds.rounds == 13 and None not in rounds.times["c1"]


def test_inputs_are_built_anew_and_released() -> None:
    builds: list[list[int]] = []

    def build() -> dict[str, Any]:
        builds.append([len(builds)])
        return {"x": builds[-1]}

    inputs = interleave.Inputs(build)
    first = inputs["x"]
    inputs.release()
    with pytest.raises(RuntimeError, match="renew"):
        inputs["x"]
    inputs.renew()
    assert inputs["x"] == [1] and inputs["x"] is not first and len(builds) == 2


def test_a_slow_first_call_does_not_make_a_candidate_slow() -> None:
    """Set-up in the first call (imports, plans) must not get the call timed once per
    turn without its untimed call, as a genuinely slow one is."""
    calls = itertools.count()

    def setup_then_fast() -> None:
        if next(calls) == 0:
            time.sleep(interleave.SLOW_S * 1.2)

    cs = [interleave.Candidate("p", "default", setup_then_fast)]
    rounds = interleave.Interleaved(cs, seed="s")
    rounds.calibrate()
    assert rounds.single["p"] < interleave.SLOW_S and rounds.calls["p"] > 1


def test_candidates_are_checked() -> None:
    with pytest.raises(ValueError, match="kind"):
        interleave.Candidate("x", "fast", lambda: None)
    with pytest.raises(ValueError, match="one default"):
        interleave.Interleaved(candidates("native", "baseline"), seed="s")


# ------------------------------------------------------------------ the report

MB = 1_000_000


def comparison(
    op: str,
    label: str,
    backend: str,
    times: dict[str, tuple[str, list[float]]],
    *,
    headline: bool = True,
    nbytes: int = 0,
    copy_nbytes: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """One item of pytest-benchmark's ``benchmarks`` list as ``compare`` writes it."""
    cands = {
        name: {"kind": kind, "calls": 1, "times": ts, "nbytes": copy_nbytes * (kind == "copy")}
        for name, (kind, ts) in times.items()
    }
    info = {"op": op, "case": f"{label} case", "label": label, "backend": backend}
    info |= {"device": "cpu", "headline": headline, "nbytes": nbytes, "portops": "portops"}
    info |= {"rounds": len(times["portops"][1]), "candidates": cands, **extra}
    stats = {"median": sorted(times["portops"][1])[2], "rounds": len(times["portops"][1])}
    return {"group": f"{op} {label}", "name": f"test_{label}", "extra_info": info, "stats": stats}


def rounds(value: float, n: int = 7, swing: float = 0.0) -> list[float]:
    return [value * (1 + swing * ((-1) ** i)) for i in range(n)]


def sample_run(tmp_path: Path, *extra: dict[str, Any]) -> Path:
    """A run: two shift_sum comparisons sharing a copy size (one with a disturbed copy),
    an einsum comparison, sweep points, a single benchmark, a skip."""
    benchmarks = [
        comparison(
            "shift_sum",
            "forward",
            "torch",
            {
                "portops": ("default", rounds(2e-3)),
                "slice-add loop": ("baseline", rounds(3e-3)),
                "conv2d": ("baseline", rounds(0.2, swing=0.3)),
                "copy": ("copy", rounds(2e-3)),
            },
            nbytes=10 * MB,
            copy_nbytes=10 * MB,  # 10 MB moved in 1 ms at best (below): 10 GB/s
        ),
        comparison(
            "shift_sum",
            "adjoint",
            "torch",
            {
                "portops": ("default", rounds(0.5e-3)),  # faster than the limit of 1 ms
                "window cat": ("baseline", rounds(1.5e-3)),
                "unfold": ("native", rounds(1e-3)),
                "copy": ("copy", [1e-3, *rounds(4e-3, 6)]),
            },
            nbytes=10 * MB,
            copy_nbytes=10 * MB,
        ),
        comparison(
            "einsum",
            "bind,jnd->bnij",
            "numpy",
            {
                "portops": ("default", rounds(1e-3)),
                "np.einsum": ("native", rounds(8e-3)),
                "np.einsum(optimize=True)": ("native", rounds(1.25e-3)),
                "hand-written matmul": ("baseline", rounds(2e-3)),
            },
        ),
    ]
    sweep = {"headline": False, "sweep": True}
    for case, t, natives in [
        ("fast", 1e-3, {"a": 2e-3, "b": 4e-3}),  # ratio 0.5
        ("tiny", 4e-6, {"a": 2e-6}),  # 2.0x but only 2 µs slower: no miss
        ("over both", 3e-3, {"a": 2e-3, "b": 2.5e-3}),  # 1.5x: a miss at 1.25x and 1.1x
        ("between", 1.2e-3, {"a": 1e-3}),  # 1.2x: a miss at 1.1x only
    ]:
        times = {"portops": ("default", rounds(t))}
        times |= {k: ("native", rounds(v)) for k, v in natives.items()}
        benchmarks.append(comparison("vecdot", case, "numpy", times, **sweep))
    single = {"op": "shift_sum", "case": "gpu", "backend": "torch", "device": "cuda"}
    single |= {"kind": "default", "name": "portops", "calls": 10}
    benchmarks.append(
        {"group": "gpu", "name": "t", "extra_info": single, "stats": {"median": 1e-3, "rounds": 3}}
    )
    benchmarks += extra
    skip = {"file": "benchmarks/test_x.py", "reason": "no CUDA device", "count": 3}
    data = {
        "datetime": "2026-01-01T12:00:00",
        "machine_info": {"cpu": {"brand_raw": "Sample CPU", "count": 2}, "gpu": None},
        "benchmarks": benchmarks,
        "portops": {"quick": False, "load_before": [1.5, 1, 1], "load_after": [2.25, 1, 1]}
        | {"seconds": 150.0, "threads": 1, "cores_usable": 2, "unavailable": [skip]},
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def by_label(run: dict[str, Any]) -> dict[str, report.Comparison]:
    return {c.label: c for c in run["comparisons"]}


def test_speedups_best_native_and_limit(tmp_path: Path) -> None:
    run = report.load(sample_run(tmp_path))
    c = by_label(run)
    fwd, adj, ein = c["forward"], c["adjoint"], c["bind,jnd->bnij"]
    assert fwd.speedup("slice-add loop").median == pytest.approx(1.5)
    assert fwd.speedup("conv2d").noisy and not fwd.speedup("slice-add loop").noisy
    assert ein.best_native() == "np.einsum(optimize=True)"
    assert ein.compared() == ["hand-written matmul", "np.einsum(optimize=True)"]
    # The best copy of the run at that size (1 ms, in the adjoint's rounds) sets both limits.
    assert fwd.limit_s == pytest.approx(1e-3) and fwd.x_limit == pytest.approx(2.0)
    assert adj.x_limit == pytest.approx(0.5) and adj.copy_disturbed
    assert report.limit_text(adj) == "below the copy" and report.limit_text(ein) == "—"


def test_sweep_misses_at_both_thresholds(tmp_path: Path) -> None:
    run = report.load(sample_run(tmp_path))
    points = report.sweep_groups(run["comparisons"])["vecdot numpy CPU"]
    assert [p.ratio_to_best() for p in points] == pytest.approx([0.5, 2.0, 1.5, 1.2])
    assert [p.misses(1.25) for p in points] == [False, False, True, False]
    assert [p.misses(1.1) for p in points] == [False, False, True, True]
    s = report.sweep_stats(points)
    assert s["misses"] == {1.25: 1, 1.1: 2} and s["worst"] == pytest.approx(2.0)
    assert s["speedup"] == pytest.approx((2 * 0.5 / 1.5 / 1.2) ** 0.25)
    assert report.sweep_summary(points).startswith("4 points, misses 1 at 1.25x, 2 at 1.1x")


def test_report_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    txt = tmp_path / "out" / "bench.txt"
    assert report.main([str(sample_run(tmp_path)), "--text", str(txt)]) == 0
    text = txt.read_text(encoding="utf-8")
    assert text == capsys.readouterr().out.split("written:")[0]
    assert "machine: Sample CPU (2 cores), no GPU\nload 1.50 → 2.25 (1-minute" in text
    headline = text.split("## Headline comparisons")[1].split("##")[0]
    row = next(line for line in headline.splitlines() if "| slice-add loop" in line)
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells == ["slice-add loop", "seed", "3.00 ms", "1.50x [1.50, 1.50]", "7", ""]
    assert "conv2d" in headline and "noisy" in headline.split("conv2d")[1].splitlines()[0]
    assert "below the copy" in headline and "limit 1.00 ms" in headline
    assert "| every sweep" in text and "misses at 1.25x | misses at 1.1x" in text
    assert "Timed one at a time" in text and "benchmarks/test_x.py: no CUDA device" in text


def test_readme_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([str(sample_run(tmp_path)), "--readme-table"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("| case ") and len([x for x in lines if x.startswith("| ")]) == 4
    assert "1.50x ±0% slice-add loop, " in out and "noisy conv2d" in out
    assert "1.25x ±0% np.einsum(optimize=True)" in out
    assert out.rstrip().endswith(
        "Sample CPU (2 cores), no GPU; load 1.50 → 2.25, 1 thread (other work busy on the "
        "rest); `nox -s bench`, 2026-01-01."
    )


def test_compare_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in "abc":
        (tmp_path / name).mkdir()
    earlier = sample_run(tmp_path / "a")
    assert report.main([str(sample_run(tmp_path / "b")), "--compare", str(earlier)]) == 0
    assert "0 headline ratios differ by over 15%" in capsys.readouterr().out
    slower = comparison(  # the seed loop 1.5x -> 2.25x slower than portops: the runs disagree
        "shift_sum",
        "forward",
        "torch",
        {
            "portops": ("default", rounds(2e-3)),
            "slice-add loop": ("baseline", rounds(4.5e-3)),
            "conv2d": ("baseline", rounds(0.4, swing=0.3)),  # twice as slow, noisy both times
        },
    )
    path = sample_run(tmp_path / "c")
    later = json.loads(path.read_text("utf-8"))

    def compared_with_slower() -> tuple[str, str]:
        """(the report, the seed loop's row) of the later run, `slower` its first item."""
        later["benchmarks"][0] = slower
        path.write_text(json.dumps(later), "utf-8")
        assert report.main([str(path), "--compare", str(earlier)]) == 1
        out = capsys.readouterr().out
        return out, next(line for line in out.splitlines() if "slice-add loop" in line)

    out, row = compared_with_slower()
    assert "50% DISAGREE" in row
    assert "noisy in both" in next(line for line in out.splitlines() if "conv2d" in line)
    assert "1 headline ratios differ by over 15%" in out
    assert "of them where the comparison's copy" not in out  # no copy in `slower`: unknown

    # The same ratios, the comparison's copy now 2.5x as slow as the earlier run's: the
    # disagreement stays counted, and the report says the machine's bandwidth moved.
    slower["extra_info"]["candidates"]["copy"] = {
        "kind": "copy", "calls": 1, "times": rounds(5e-3), "nbytes": 10 * MB
    }  # fmt: skip
    out, row = compared_with_slower()
    assert "50% DISAGREE (its copy 2.50x the time)" in row
    assert "1 headline ratios differ by over 15%" in out
    assert "1 of them where the comparison's copy of its bytes took over 25%" in out


def test_main_without_results(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("", encoding="utf-8")
    assert report.main([str(tmp_path / "empty.json")]) == 1
    assert report.main([str(tmp_path / "missing.json")]) == 1


# ------------------------------------------------------------------ the chart


def test_chart_is_legible_at_page_width(tmp_path: Path) -> None:
    """At most 1600 px tall; every text at least 8 pt when the figure is shown 800 px
    wide; every title and label within the figure; the machine and load in the title."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from benchmarks import chart

    def case(i: int) -> dict[str, Any]:
        times = {"portops": ("default", rounds(1e-3))}
        times |= {f"m{j}": ("baseline", rounds(2e-3)) for j in range(3)}
        return comparison("vecdot", f"case {i}", "torch", times)

    many = [case(i) for i in range(20)]
    for i in range(12):  # a sweep of more points than the default run's sample: a panel
        times = {"portops": ("default", rounds(1e-3)), "a": ("native", rounds(1e-3 * (1 + i)))}
        many.append(comparison("einsum", f"p{i}", "torch", times, headline=False, sweep=True))
    fig = chart.draw_chart(report.load(sample_run(tmp_path, *many)))
    try:
        fig.canvas.draw()
        width_px, height_px = fig.get_size_inches() * chart.DPI
        assert height_px <= 1600
        scale = 800 / (fig.get_size_inches()[0] * 96)  # shown 800 px wide, at 96 px per inch
        renderer = fig.canvas.get_renderer()
        texts = [t for t in fig.findobj(plt.Text) if t.get_text().strip() and t.get_visible()]
        for t in texts:
            assert t.get_fontsize() * scale >= 8, t.get_text()
            box = t.get_window_extent(renderer)
            assert -1 <= box.x0 and box.x1 <= width_px + 1, t.get_text()
            assert -1 <= box.y0 and box.y1 <= height_px + 1, t.get_text()
        title = fig.get_suptitle()
        assert "Sample CPU (2 cores), no GPU\nload 1.50 → 2.25, 1 thread" in title
        labels = {t.get_text() for ax in fig.axes for t in ax.get_yticklabels()}
        assert {"slice-add loop", "conv2d", "hand-written matmul", "forward"} <= labels
        assert any(label.startswith("einsum torch CPU: ") for label in labels)  # the sweep
    finally:
        plt.close(fig)


def test_chart_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "bench.png"
    assert report.main([str(sample_run(tmp_path)), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ the docs page


def test_docs_page_and_history(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks import docs_page

    source = sample_run(tmp_path)
    recorded = docs_page.record(source, tmp_path / "runs")
    assert recorded.name == "2026-01-01-sample-cpu-2-cores-no-gpu.json"
    assert all("data" not in b["stats"] for b in json.loads(recorded.read_text())["benchmarks"])
    inc = docs_page.write(tmp_path / "generated", [recorded])
    text = inc.read_text(encoding="utf-8")
    assert text.startswith("Sample CPU (2 cores), no GPU\n~~~~")
    assert ".. figure:: /generated/performance-sample-cpu-2-cores-no-gpu.png" in text
    assert (tmp_path / "generated" / "performance-sample-cpu-2-cores-no-gpu.png").is_file()
    assert "``slice-add loop``" in text and "History\n~~~~~~~" in text
    assert "4 points, 1 / 2 misses" in text
    empty = docs_page.write(tmp_path / "none", [])
    assert "No benchmark results" in empty.read_text(encoding="utf-8")


# ------------------------------------------------------------------ the conftest

TOY = """
import os
import pytest
from benchmarks.interleave import Candidate, Inputs

N = 10 if os.environ.get("PORTOPS_BENCH_QUICK") == "1" else 1000

@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_toy(compare, backend):
    d = Inputs(lambda: {"n": N})  # released between visits: a read then would raise
    compare([Candidate("portops", "default", lambda: sum(range(d["n"]))),
             Candidate("loop", "baseline", lambda: sum(range(2 * d["n"]))),
             Candidate("copy", "copy", lambda: list(range(N)), nbytes=16 * N)],
            op="toy", case="sum", backend=backend, label="forward", headline=True,
            nbytes=8 * N, inputs=d)

def test_unavailable(compare):
    pytest.skip("CUDA not available")

@pytest.mark.full
def test_full_only(compare):
    compare([Candidate("portops", "default", lambda: 0)], op="toy", case="x", backend="numpy")

def test_single(bench):
    bench(lambda: 0, op="toy", case="one", backend="numpy", device="cpu", kind="default",
          name="t", rounds=3)

def test_bad_kind(compare):
    compare([Candidate("portops", "fast", lambda: 0)], op="toy", case="x", backend="numpy")
"""


def run_toy(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    """pytest on a copy of the benchmark package holding the toy file instead of the real."""
    pytest.importorskip("pytest_benchmark")
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    for name in ("__init__.py", "conftest.py", "report.py", "ratios.py", "interleave.py"):
        shutil.copy(ROOT / "benchmarks" / name, tmp_path / "benchmarks" / name)
    toy = tmp_path / "benchmarks" / "test_sample.py"
    toy.write_text(textwrap.dedent(TOY), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # Without the outer run's variables: xdist's would disable pytest-benchmark in it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PORTOPS_BENCH"))}
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", "-q"]
    cmd += ["--benchmark-quiet", "--benchmark-json=b.json", *args]
    if not any(a.startswith("--bench-threads") for a in args):
        cmd.append("--bench-threads=all")  # no second spent measuring the machine's load
    env["PYTHONPATH"] = pythonpath(str(tmp_path))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    path = tmp_path / "b.json"
    return proc.returncode, out, json.loads(path.read_text() or "{}") if path.is_file() else {}


def test_compare_records_rounds_candidates_and_load(tmp_path: Path) -> None:
    rc, out, data = run_toy(tmp_path, "--bench-budget=1", "--bench-threads=1", "-k", "not bad")
    assert rc == 0, out
    assert "[1/" in out and "s left] benchmarks/test_sample.py::test_toy" in out  # progress
    assert "test_full_only" not in out  # --full only
    toy = [b for b in data["benchmarks"] if b["extra_info"].get("op") == "toy"]
    assert [b["group"] for b in toy[:2]] == [
        "toy sum numpy cpu forward",
        "toy sum torch cpu forward",
    ]
    info = toy[0]["extra_info"]
    assert info["headline"] and info["label"] == "forward" and info["nbytes"] == 8000
    assert set(info["candidates"]) == {"portops", "loop", "copy"}
    assert (
        info["candidates"]["copy"]["nbytes"] == 16000
        and info["candidates"]["loop"]["kind"] == "baseline"
    )
    assert info["rounds"] >= 5 + 4 and toy[0]["stats"]["rounds"] == info["rounds"]
    # Two later visits of two rounds each, once every benchmark has run; on a busy
    # machine a ratio still noisy then gets further visits of two rounds.
    visits = info["visits"]
    first = visits[1]
    assert first >= 5 and visits[:3] == [0, first, first + 2]
    assert all(b - a == 2 for a, b in itertools.pairwise(visits[1:]))
    assert visits[-1] == info["rounds"] - 2
    assert "[revisit 2/2] headline comparisons" in out
    # pytest-benchmark's stats are portops' seconds per call, a value per round.
    assert toy[0]["stats"]["data"] == info["candidates"]["portops"]["times"]
    status = data["portops"]
    assert len(status["load_before"]) == 3 and len(status["load_after"]) == 3
    assert status["threads"] == 1 and status["busy_cores_at_start"] is None
    assert status["unavailable"] == [
        {"file": "benchmarks/test_sample.py", "reason": "CUDA not available", "count": 1}
    ]
    assert data["machine_info"]["gpu"] is None and "versions" in data["machine_info"]
    run = report.load(tmp_path / "b.json")
    assert len(run["comparisons"]) == 2 and run["singles"][0]["rounds"] == 3


def test_selection_full_require_and_bad_kind(tmp_path: Path) -> None:
    rc, out, data = run_toy(tmp_path, "--quick", "--bench-backends=torch", "-k", "toy")
    assert rc == 0, out
    assert [b["extra_info"]["backend"] for b in data["benchmarks"]] == ["torch"]
    # --quick: two rounds, then two later visits of one round (a headline comparison)
    assert data["benchmarks"][0]["stats"]["rounds"] == 4
    assert data["benchmarks"][0]["extra_info"]["visits"] == [0, 2, 3]
    rc, out, data = run_toy(tmp_path, "--full", "-k", "full_only")
    assert rc == 0 and [b["name"] for b in data["benchmarks"]] == ["test_full_only"]
    rc, out, _ = run_toy(tmp_path, "--quick", "--bench-require=numpy,torch-cuda", "-k", "toy")
    assert rc == 1 and "torch CUDA is required" in out and "numpy CPU is required" not in out
    rc, out, _ = run_toy(tmp_path, "--quick", "-k", "bad")
    assert rc == 1 and "kind 'fast' is not one of" in out
