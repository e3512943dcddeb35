"""The benchmark report (benchmarks/report.py) on a small fabricated pytest-benchmark JSON,
and the benchmark conftest's helper, budget and skips on a toy benchmark file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402

NP = ("shift_sum", "fwd", "numpy", "cpu")


def bench(where: tuple[str, ...], kind: str, name: str, median: float, **extra: Any) -> dict:
    """One item of pytest-benchmark's ``benchmarks`` list, as the ``bench`` helper writes it."""
    op, case, backend, device = where
    info = {"op": op, "case": case, "backend": backend, "device": device, "kind": kind}
    return {
        "group": " ".join(where),
        "name": f"test_{name}",
        "extra_info": {**info, "name": name, **extra},
        "stats": {"median": median, "rounds": 5},
    }


def sample(tmp_path: Path, *extra: dict) -> Path:
    """A run: a shift_sum group with copies, one without a copy, a sweep, a skip."""
    benchmarks = [
        bench(NP, "copy", "copy", 1e-3, bytes=2000),  # 2000 bytes moved in 1 ms
        bench(NP, "copy", "slow copy", 3e-3, bytes=2000),
        bench(NP, "default", "portops", 1.5e-3, bytes=1000),
        bench(NP, "baseline", "loop", 3e-3, bytes=1000),
        bench(NP, "baseline", "paired", 6e-3, paired_copy=2e-3, copy_bytes=4000, bytes=1000),
        bench(("einsum", "ij,jk", "torch", "cpu"), "default", "portops", 2e-3),
        bench(("einsum", "ij,jk", "torch", "cpu"), "native", "torch.einsum", 5e-3),
    ]
    sweep = ("vecdot", "p", "numpy", "cpu")
    benchmarks += [
        bench(sweep, "default", "fast", 10e-3, calls=10, native={"a": 2e-3, "b": 4e-3}),
        bench(sweep, "default", "tiny", 4e-5, calls=10, native={"a": 2e-6}),  # +2 us: no miss
        bench(sweep, "default", "slow", 30e-3, calls=10, native={"a": 2e-3, "b": 2.5e-3}),
        bench(
            sweep, "default", "rerun", 1.0, native={"a": 1e-3}, rerun={"portops": 1e-3, "a": 2e-3}
        ),
        *extra,
    ]
    skip = {"file": "benchmarks/test_x.py", "reason": "no CUDA device", "count": 3}
    data = {
        "datetime": "2026-01-01T00:00:00",
        "machine_info": {"cpu": {"brand_raw": "Sample CPU", "count": 2}, "gpu": None},
        "benchmarks": benchmarks,
        "portops": {"quick": False, "unavailable": [skip]},
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def rows(run: dict, where: tuple[str, ...]) -> dict[str, tuple]:
    members = [e for e in run["entries"] if e["group"] == " ".join(where)]
    return {r[0]["name"]: r[1:] for r in report.group_rows(members)}


def test_copy_and_limit_ratios(tmp_path: Path) -> None:
    r = rows(report.load(sample(tmp_path)), NP)
    assert r["copy"] == (pytest.approx(1.0), pytest.approx(1.0), None)  # the fastest copy
    assert r["slow copy"][0] == pytest.approx(3.0)
    # 1.5 ms over a 1 ms copy; it must move half the copy's bytes, so its limit is 0.5 ms.
    assert r["portops"] == (pytest.approx(1.5), pytest.approx(3.0), None)
    # A copy timed beside the entry's rounds replaces the group's, with its own bytes.
    assert r["paired"][:2] == (pytest.approx(3.0), pytest.approx(12.0))


def test_default_speedups_and_row_order(tmp_path: Path) -> None:
    run = report.load(sample(tmp_path))
    r = rows(run, NP)
    assert r["loop"][2] == pytest.approx(2.0) and r["paired"][2] == pytest.approx(4.0)
    assert list(r) == ["copy", "slow copy", "portops", "loop", "paired"]
    einsum = rows(run, ("einsum", "ij,jk", "torch", "cpu"))
    assert einsum["torch.einsum"] == (None, None, pytest.approx(2.5))  # no copy: no ratio


def test_sweep_best_native_ratio_and_misses(tmp_path: Path) -> None:
    points = report.split(report.load(sample(tmp_path))["entries"])[1]["vecdot numpy cpu"]
    assert [e["best"] for e in points] == [("a", 2e-3), ("a", 2e-6), ("a", 2e-3), ("a", 2e-3)]
    assert [e["ratio"] for e in points] == pytest.approx([0.5, 2.0, 1.5, 0.5])
    assert [e["miss"] for e in points] == [False, False, True, False]
    assert points[3]["median"] == 1e-3  # a missed point measured again: the rerun counts
    summary = report.sweep_summary(points)
    assert summary.startswith("4 points, 1 miss, worst ratio 2.00x")
    assert summary.endswith(f"{report.factor((0.5 * 2 * 1.5 * 0.5) ** -0.25)}")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.50 s"), (0.0123, "12.3 ms"), (1.5e-4, "150 µs"), (4.2e-8, "42.0 ns"), (None, "—")],
)
def test_format_time(seconds: float | None, text: str) -> None:
    assert report.seconds(seconds) == text


def test_main_writes_tables_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    txt, png = tmp_path / "out" / "bench.txt", tmp_path / "out" / "bench.png"
    assert report.main([str(sample(tmp_path)), "--text", str(txt), "--png", str(png)]) == 0
    text = txt.read_text(encoding="utf-8")
    assert text == capsys.readouterr().out.split("written:")[0]
    assert "CPU: Sample CPU (2 logical cores)" in text and "Columns:" in text
    shift_sum = text.split("## shift_sum")[1].splitlines()
    line = next(row for row in shift_sum if "| portops " in row)
    assert [c.strip() for c in line.split("|")[2:-1]] == [
        *("portops", "default", "1.50 ms", "1.50x", "3.00x", "(default)")
    ]
    assert "| paired " in text and "3.00x paired" in text
    assert "## vecdot numpy cpu sweep (4 points, 1 miss" in text and "1.50x MISS" in text
    assert "Every sweep together: 4 points, 1 miss, worst ratio 2.00x" in text
    assert "benchmarks/test_x.py: no CUDA device (3 skipped)" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_main_without_results(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("", encoding="utf-8")
    assert report.main([str(tmp_path / "empty.json")]) == 1
    assert report.main([str(tmp_path / "missing.json")]) == 1


TOY = """
import os
import pytest

N = 10 if os.environ.get("PORTOPS_BENCH_QUICK") == "1" else 100_000

@pytest.mark.parametrize("kind", ["copy", "default", "baseline"])
@pytest.mark.parametrize("backend", ["numpy", "torch-cuda"])
def test_toy(bench, backend, kind):
    if backend == "torch-cuda":
        pytest.skip("CUDA not available")
    bench(lambda: sum(range(N)), op="toy", case="sum", backend="numpy", device="cpu",
          kind=kind, name=kind, rounds=50, bytes=8 * N)

def test_torch_cpu(bench):
    bench(lambda: 0, op="toy", case="sum", backend="torch", device="cpu", kind="default", name="t")

def test_bad_kind(bench):
    bench(lambda: 0, op="toy", case="sum", backend="numpy", device="cpu", kind="fast", name="b")
"""


def run_toy(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    """pytest on a copy of the benchmark package holding the toy file instead of the real."""
    pytest.importorskip("pytest_benchmark")
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    for name in ("__init__.py", "conftest.py", "report.py"):
        shutil.copy(ROOT / "benchmarks" / name, tmp_path / "benchmarks" / name)
    toy = tmp_path / "benchmarks" / "test_toy.py"
    toy.write_text(textwrap.dedent(TOY), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # Without the outer run's variables: xdist's would disable pytest-benchmark in it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PORTOPS_BENCH"))}
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", "-q"]
    cmd += ["--benchmark-quiet", "--benchmark-json=b.json", *args]
    env["PYTHONPATH"] = str(tmp_path)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    return proc.returncode, out, json.loads((tmp_path / "b.json").read_text() or "{}")


def test_helper_describes_budget_shortens_and_skips_are_named(tmp_path: Path) -> None:
    rc, out, data = run_toy(tmp_path, "--bench-budget=1e-9", "-k", "not bad")
    assert rc == 0, out
    assert "[1/7, " in out and "s left] benchmarks/test_toy.py::test_toy" in out  # progress
    entries = {b["extra_info"]["name"]: b for b in data["benchmarks"]}
    assert entries["default"]["group"] == "toy sum numpy cpu"
    info = entries["copy"]["extra_info"]
    assert info == {"op": "toy", "case": "sum", "backend": "numpy", "device": "cpu"} | {
        "kind": "copy",
        "name": "copy",
        "bytes": 800_000,
    }
    assert all(b["stats"]["rounds"] == 1 for b in data["benchmarks"])  # 50 asked, 1 fits
    skip = {"file": "benchmarks/test_toy.py", "reason": "CUDA not available", "count": 3}
    assert data["portops"]["unavailable"] == [skip]
    assert "benchmarks/test_toy.py: CUDA not available (3 skipped)" in out
    # Beside pytest-benchmark's own machine info: the GPU (torch is not imported here).
    assert data["machine_info"]["gpu"] is None and "versions" in data["machine_info"]


def test_selection_require_and_bad_kind(tmp_path: Path) -> None:
    rc, out, data = run_toy(tmp_path, "--quick", "--bench-backends=torch", "-k", "not bad")
    assert rc == 0, out
    assert [b["name"] for b in data["benchmarks"]] == ["test_torch_cpu"]
    assert "6 skipped" in out  # numpy: not selected (and not named as unavailable)
    assert [u["count"] for u in data["portops"]["unavailable"]] == [3]
    rc, out, _ = run_toy(tmp_path, "--quick", "--bench-require=numpy,torch-cuda", "-k", "not bad")
    assert rc == 1 and "torch CUDA is required" in out and "numpy CPU is required" not in out
    rc, out, _ = run_toy(tmp_path, "--quick", "-k", "bad")
    assert rc == 1 and "kind in ('copy', 'default', 'native', 'baseline')" in out


def test_chart_titles_fit_in_the_figure(tmp_path: Path) -> None:
    """Every panel's title lies within the figure, below the figure's own title (a
    sweep's summary ran past the right edge beside long bar labels)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    long_case = bench(("shift_sum", "B16 C28 " * 8, "numpy", "cpu"), "default", "portops", 1e-3)
    fig = report.draw_chart(report.load(sample(tmp_path, long_case)))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        top = fig.get_suptitle()
        assert top
        top_box = next(t for t in fig.texts if t.get_text() == top).get_window_extent(renderer)
        titles = [ax._left_title for ax in fig.axes if ax.get_title(loc="left")]
        assert len(titles) == 3  # shift_sum, einsum, the vecdot sweep
        for title in titles:
            box = title.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, title.get_text()
            assert box.y1 <= top_box.y0, title.get_text()
    finally:
        plt.close(fig)
