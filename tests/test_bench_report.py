"""The benchmark report (benchmarks/report.py) and the benchmark conftest's bookkeeping."""

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

# --------------------------------------------------------------------------- sample runs


def bench(group: str, name: str, kind: str, median: float, **extra: Any) -> dict[str, Any]:
    """One item of pytest-benchmark's ``benchmarks`` list, following the convention."""
    parts = group.split()
    info = {"op": parts[0], "kind": kind, "backend": parts[-2], "device": parts[-1], "name": name}
    return {
        "group": group,
        "name": f"test_{name}",
        "fullname": f"benchmarks/test_x.py::test_{name}",
        "extra_info": {**info, **extra},
        "stats": {"median": median, "rounds": 5, "min": median, "mean": median},
    }


NP = "shift_sum fwd numpy cpu"
TORCH = "shift_sum fwd torch cpu"
EIN = "einsum bij,bjk numpy cpu"


def sample_json(scale: float = 1.0, *, quick: bool = False) -> dict[str, Any]:
    """Two shift_sum groups and one einsum group without a roofline."""
    return {
        "datetime": "2026-01-01T00:00:00",
        "machine_info": {"cpu": {"brand_raw": "Sample CPU", "count": 2}},
        "benchmarks": [
            bench(NP, "copy", "roofline", 1e-3 * scale),
            bench(NP, "add.at", "portops", 8e-3 * scale),
            bench(NP, "portops", "portops", 1.5e-3 * scale),
            bench(NP, "loop", "baseline", 3e-3 * scale),
            bench(NP, "conv2d", "baseline", 0.27 * scale),
            bench(TORCH, "copy", "roofline", 2e-3),
            bench(TORCH, "scatter_add_", "portops", 5e-3),
            bench(TORCH, "unfold", "portops", 2.5e-3, default=True),
            bench(TORCH, "loop", "baseline", 10e-3),
            bench(EIN, "portops", "portops", 2e-3),
            bench(EIN, "np.einsum", "baseline", 50e-3),
        ],
        "portops": {
            "quick": quick,
            "machine": {"cpu": "Sample CPU", "cores": 2, "gpu": None},
            "versions": {"numpy": "2.0"},
            "unavailable": [{"backend": "torch CUDA", "reason": "no CUDA device", "count": 3}],
        },
    }


def sample_run(scale: float = 1.0, *, quick: bool = False) -> report.Run:
    return report.run_from_json(sample_json(scale, quick=quick))


def table(run: report.Run, group: str) -> report.GroupTable:
    tables = report.tables_by_op(run.entries)
    return next(t for ts in tables.values() for t in ts if t.group == group)


def row(t: report.GroupTable, name: str) -> report.Row:
    return next(r for r in t.rows if r.entry.name == name)


# --------------------------------------------------------------------------- table maths


def test_ratios_to_the_roofline() -> None:
    t = table(sample_run(), NP)
    assert t.roofline is not None and t.roofline.name == "copy"
    assert row(t, "copy").roofline_ratio == pytest.approx(1.0)
    assert row(t, "portops").roofline_ratio == pytest.approx(1.5)
    assert row(t, "conv2d").roofline_ratio == pytest.approx(270)
    assert t.notes == []


def test_speedups_of_the_default_over_the_others() -> None:
    t = table(sample_run(), NP)
    assert t.default is not None and t.default.name == "portops"  # named "portops"
    assert row(t, "portops").is_default and row(t, "portops").speedup is None
    assert row(t, "loop").speedup == pytest.approx(2.0)
    assert row(t, "conv2d").speedup == pytest.approx(180)
    assert row(t, "add.at").speedup == pytest.approx(8 / 1.5)  # an alternative: also shown
    assert row(t, "copy").speedup is None


def test_rows_ordered_roofline_default_alternatives_baselines() -> None:
    names = [r.entry.name for r in table(sample_run(), NP).rows]
    assert names == ["copy", "portops", "add.at", "loop", "conv2d"]


def test_default_marked_in_extra_info_wins() -> None:
    t = table(sample_run(), TORCH)
    assert t.default is not None and t.default.name == "unfold"
    assert row(t, "loop").speedup == pytest.approx(4.0)
    assert row(t, "scatter_add_").speedup == pytest.approx(2.0)


def test_default_falls_back_to_the_first_portops_entry() -> None:
    entries = [
        report.entry_from_json(bench(NP, "blocked", "portops", 2.0)),
        report.entry_from_json(bench(NP, "add.at", "portops", 1.0)),
    ]
    assert report.pick_default(entries) == entries[0]
    assert report.pick_default([report.entry_from_json(bench(NP, "x", "baseline", 1.0))]) is None


def test_missing_roofline_is_noted_not_guessed() -> None:
    t = table(sample_run(), EIN)
    assert t.roofline is None
    assert all(r.roofline_ratio is None for r in t.rows)
    assert row(t, "np.einsum").speedup == pytest.approx(25)
    assert any("no roofline" in n for n in t.notes)
    text = report.report_text(sample_run())
    assert "no roofline" in text


def test_several_rooflines_use_the_fastest() -> None:
    data = [bench(NP, "copyto", "roofline", 2.0), bench(NP, "copy_", "roofline", 1.0)]
    data.append(bench(NP, "portops", "portops", 3.0))
    t = report.summarise_group(NP, [report.entry_from_json(b) for b in data])
    assert t.roofline is not None and t.roofline.name == "copy_"
    assert row(t, "portops").roofline_ratio == pytest.approx(3.0)
    assert any("2 roofline entries" in n for n in t.notes)


def test_paired_roofline_divides_its_own_entry() -> None:
    """A copy timed between an entry's rounds replaces the group's for that entry."""
    data = [bench(NP, "copy", "roofline", 2.0), bench(NP, "loop", "baseline", 6.0)]
    data.append(bench(NP, "portops", "portops", 3.0, paired_roofline=1.5))
    data.append(bench(NP, "odd", "baseline", 4.0, paired_roofline=0))  # ignored: not > 0
    t = report.summarise_group(NP, [report.entry_from_json(b) for b in data])
    assert row(t, "portops").roofline_ratio == pytest.approx(2.0)
    assert row(t, "loop").roofline_ratio == pytest.approx(3.0)
    assert row(t, "odd").roofline_ratio == pytest.approx(2.0)
    assert row(t, "copy").roofline_ratio == pytest.approx(1.0)
    assert row(t, "loop").speedup == pytest.approx(2.0)  # speedups stay median / median


def test_group_without_portops_entry() -> None:
    data = [bench(NP, "copy", "roofline", 1.0), bench(NP, "loop", "baseline", 3.0)]
    t = report.summarise_group(NP, [report.entry_from_json(b) for b in data])
    assert t.default is None and row(t, "loop").speedup is None
    assert any("no portops entry" in n for n in t.notes)


def test_tables_grouped_per_operation_in_run_order() -> None:
    tables = report.tables_by_op(sample_run().entries)
    assert list(tables) == ["shift_sum", "einsum"]
    assert [t.group for t in tables["shift_sum"]] == [NP, TORCH]


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.50 s"), (0.0123, "12.3 ms"), (1.5e-4, "150 µs"), (4.2e-8, "42.0 ns"), (None, "—")],
)
def test_format_time(seconds: float | None, text: str) -> None:
    assert report.format_time(seconds) == text


@pytest.mark.parametrize(
    ("value", "text"), [(1.234, "1.23x"), (12.34, "12.3x"), (270.4, "270x"), (0.0066, "0.0066x")]
)
def test_format_factor(value: float, text: str) -> None:
    assert report.format_factor(value) == text


def test_report_text_names_machine_tables_and_skips() -> None:
    text = report.report_text(sample_run())
    assert "CPU: Sample CPU (2 logical cores)" in text
    assert "GPU: none detected" in text
    assert "## shift_sum" in text and "## einsum" in text
    assert "portops (default)" in text and "270x" in text and "180x" in text
    assert "torch CUDA: no CUDA device (3 benchmarks)" in text


def test_quick_mode_is_stated() -> None:
    assert "mode: quick" in report.report_text(sample_run(quick=True))
    assert "mode: quick" not in report.report_text(sample_run())


def test_rounds_of_several_calls_report_the_time_of_one() -> None:
    data = sample_json()
    data["benchmarks"].append(bench(NP, "batched", "baseline", 8e-3, calls=4))
    assert row(table(report.run_from_json(data), NP), "batched").entry.median == 2e-3


def test_limit_counts_the_bytes_the_operation_must_move() -> None:
    data = sample_json()
    data["benchmarks"][0]["extra_info"]["copy_bytes"] = 1000  # the copy moves 2000 bytes
    data["benchmarks"][2]["extra_info"]["bytes"] = 1000  # portops must move 1000
    t = table(report.run_from_json(data), NP)
    assert row(t, "portops").roofline_ratio == pytest.approx(1.5)
    assert row(t, "portops").limit_ratio == pytest.approx(3.0)
    assert row(t, "loop").limit_ratio is None  # no byte count: no limit
    text = report.report_text(report.run_from_json(data))
    assert "x copy" in text and "x limit" in text and "Columns:" in text


def sweep_point(name: str, portops: float, **native: float) -> dict[str, Any]:
    return bench("vecdot sweep numpy cpu", name, "portops", portops * 10, calls=10, native=native)


def test_sweep_table_ratios_misses_and_summary() -> None:
    data = sample_json()
    data["benchmarks"] += [
        sweep_point("fast", 1e-3, a=2e-3, b=4e-3),  # 0.5x
        sweep_point("tiny", 4e-6, a=2e-6),  # 2x, but only 2 us more: no miss
        sweep_point("slow", 3e-3, a=2e-3, b=2.5e-3),  # 1.5x: a miss
    ]
    run = report.run_from_json(data)
    points = report.sweep_points(run.entries)["vecdot numpy"]
    assert [report.is_miss(e) for e in points] == [False, False, True]
    assert report.best_native(points[2]) == ("a", 2e-3)
    assert "vecdot sweep" not in {
        t.group for ts in report.tables_by_op(run.entries).values() for t in ts
    }
    text = report.report_text(run)
    assert "3 points, 1 miss, worst ratio 2.00x" in text
    assert "1.50x MISS" in text and "2.00 ms a" in text


# --------------------------------------------------------------------------- CLI


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_main_writes_text_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    data = sample_json()
    data["benchmarks"] += [sweep_point("p", 1e-3, a=2e-3), sweep_point("q", 3e-3, a=2e-3)]
    results = write_json(tmp_path / "bench.json", data)
    png, txt = tmp_path / "out" / "bench.png", tmp_path / "out" / "bench.txt"
    assert report.main([str(results), "--text", str(txt), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
    assert "vecdot numpy: sweep" in txt.read_text(encoding="utf-8")
    assert "## shift_sum" in capsys.readouterr().out


def test_main_without_results_uses_the_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = write_json(tmp_path / "s.json", sample_json()["portops"])
    assert report.main([str(tmp_path / "none.json"), "--status", str(status)]) == 0
    out = capsys.readouterr().out
    assert "No benchmark ran." in out and "torch CUDA: no CUDA device" in out
    assert report.main([str(tmp_path / "none.json")]) == 1
    (tmp_path / "empty.json").write_text("", encoding="utf-8")
    assert report.main([str(tmp_path / "empty.json")]) == 1


def test_script_runs_as_a_file(tmp_path: Path) -> None:
    results = write_json(tmp_path / "bench.json", sample_json())
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), str(results)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "## einsum" in out


# --------------------------------------------------------------------------- conftest


def conftest_module() -> Any:
    pytest.importorskip("pytest_benchmark")
    from benchmarks import conftest

    return conftest


def test_parse_selection() -> None:
    c = conftest_module()
    assert c.parse_selection(None) is None and c.parse_selection("all") is None
    assert c.parse_selection("numpy, torch-cuda,cupy") == {
        ("numpy", "cpu"),
        ("torch", "cuda"),
        ("cupy", "cuda"),
    }


@pytest.mark.parametrize(
    ("nodeid", "reason", "label"),
    [
        ("b/test_x.py::test_a[cupy-portops]", "could not import 'cupy': No module named", "cupy"),
        ("b/test_x.py::test_a[torch-cuda-loop]", "CUDA not available", "torch CUDA"),
        ("b/test_x.py::test_a[torch-roofline]", "no GPU", "torch CUDA"),
        ("b/test_x.py::test_a[numpy-x]", "could not import 'opt_einsum'", "numpy CPU"),
        ("b/test_x.py::test_b", "something else", "b/test_x.py::test_b"),
        ("b/test_v.py::test_torch[cuda-8x8-np.vecdot]", "NumPy runs on the CPU only", "torch CUDA"),
        ("b/test_v.py::test_cupy[8x8-portops]", "cupy has no CUDA device", "cupy"),
    ],
)
def test_skip_labels(nodeid: str, reason: str, label: str) -> None:
    assert conftest_module().skip_label(nodeid, reason) == label


def test_summarise_skips_counts_and_filters_by_selection() -> None:
    c = conftest_module()
    skips = [("t.py::a[torch-cuda]", "CUDA not available")] * 2 + [("t.py::b", "cupy missing")]
    assert c.summarise_skips(skips) == [
        {"backend": "cupy", "reason": "cupy missing", "count": 1},
        {"backend": "torch CUDA", "reason": "CUDA not available", "count": 2},
    ]
    only_torch_cuda = c.summarise_skips(skips, c.parse_selection("torch-cuda"))
    assert [s["backend"] for s in only_torch_cuda] == ["torch CUDA"]


@pytest.mark.parametrize(
    ("group", "target"),
    [
        ("shift_sum fwd numpy cpu", ("numpy", "cpu")),
        ("vecdot 4096x4096 torch cuda fwd+bwd", ("torch", "cuda")),
        ("einsum bij,bjk cupy cuda", ("cupy", "cuda")),
        ("no device here", None),
        (None, None),
    ],
)
def test_group_target(group: str | None, target: tuple[str, str] | None) -> None:
    assert conftest_module().group_target(group) == target


class _Item:
    def __init__(self, **params: object) -> None:
        self.callspec = type("CallSpec", (), {"params": params})()


@pytest.mark.parametrize(
    ("params", "target"),
    [
        ({"backend": "numpy"}, ("numpy", None)),
        ({"backend": "torch-cuda"}, ("torch", "cuda")),
        ({"backend": "torch_cuda"}, ("torch", "cuda")),
        ({"backend": "array_api_strict"}, ("array_api_strict", None)),
        ({"backend": "torch", "device": "cuda"}, ("torch", "cuda")),
        ({"backend": "numpy_readonly"}, (None, None)),
        ({"name": "portops"}, (None, None)),
    ],
)
def test_item_target_only_when_sure(params: dict[str, str], target: tuple[Any, Any]) -> None:
    assert conftest_module().item_target(_Item(**params)) == target


def test_benchmark_target_falls_back_to_extra_info() -> None:
    c = conftest_module()
    assert c.benchmark_target("odd", {"backend": "JAX", "device": "cpu"}) == ("jax", "cpu")
    assert c.benchmark_target("odd", {}) is None


def test_target_labels() -> None:
    c = conftest_module()
    labels = [c.target_label(t) for t in [("torch", "cuda"), ("cupy", "cuda"), ("numpy", "cpu")]]
    assert labels == ["torch CUDA", "cupy", "numpy CPU"]


def test_missing_expected_backends_are_named_with_a_reason() -> None:
    c = conftest_module()
    expected = c.parse_selection("numpy,no_such_lib_xyz,torch-cuda")
    already = [{"backend": "torch CUDA", "reason": "CUDA not available", "count": 2}]
    missing = c.missing_expected(expected, {("numpy", "cpu")}, already)
    assert [m["backend"] for m in missing] == ["no_such_lib_xyz CPU"]
    assert "not installed" in missing[0]["reason"] and missing[0]["count"] == 0


def test_convention_problems() -> None:
    c = conftest_module()
    good = {"op": "x", "kind": "portops", "backend": "numpy", "device": "cpu", "name": "p"}
    assert c.convention_problems("x case numpy cpu", good) == []
    bad = c.convention_problems("x numpy", {**good, "kind": "fast", "name": ""})
    assert len(bad) == 3


SAMPLE_BENCHMARKS = """
import os
import pytest

N = 10 if os.environ.get("PORTOPS_BENCH_QUICK") == "1" else 10_000
ENTRIES = [("roofline", "copy"), ("portops", "portops"), ("baseline", "loop")]

@pytest.mark.parametrize("kind,name", ENTRIES)
@pytest.mark.parametrize("backend", ["numpy", "torch-cuda"])
def test_param(benchmark, backend, kind, name):
    b, _, d = backend.partition("-")
    if d == "cuda":
        pytest.skip("CUDA not available")
    benchmark.group = f"toy sum {b} cpu"
    benchmark.extra_info.update(op="toy", kind=kind, backend=b, device="cpu", name=name)
    benchmark(sum, range(N))

@pytest.mark.parametrize("dev", ["cpu", "cuda"])
def test_unparametrized_backend(benchmark, dev):
    benchmark.group = f"toy sum torch {dev}"
    benchmark.extra_info.update(op="toy", kind="portops", backend="torch", device=dev, name="t")
    benchmark(sum, range(N))

def test_module_missing(benchmark):
    pytest.importorskip("no_such_backend_module_xyz")

def test_suffixed_group(benchmark):
    benchmark.group = "toy sum numpy cpu fwd+bwd"
    benchmark.extra_info.update(op="toy", kind="portops", backend="numpy", device="cpu", name="t")
    benchmark(sum, range(N))
"""


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    """A copy of the benchmark package with a toy benchmark file instead of the real ones."""
    pytest.importorskip("pytest_benchmark")
    pkg = tmp_path / "benchmarks"
    pkg.mkdir()
    for name in ("__init__.py", "conftest.py", "report.py"):
        shutil.copy(ROOT / "benchmarks" / name, pkg / name)
    (pkg / "test_toy.py").write_text(textwrap.dedent(SAMPLE_BENCHMARKS), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return tmp_path


def run_pytest(cwd: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    # Without the outer run's variables: xdist's would disable pytest-benchmark in it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PORTOPS_BENCH"))}
    env["PYTHONPATH"] = str(cwd)
    status = cwd / "status.json"
    cmd = [sys.executable, "-m", "pytest", "benchmarks", "-p", "no:cacheprovider", "-q"]
    cmd += ["--benchmark-quiet", f"--bench-status={status}", f"--benchmark-json={cwd / 'b.json'}"]
    proc = subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True)
    data = json.loads(status.read_text(encoding="utf-8")) if status.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, data


def test_conftest_names_what_could_not_run(bench_dir: Path) -> None:
    rc, out, status = run_pytest(bench_dir, "--quick")
    assert rc == 0, out
    assert "backends that could not run" in out
    assert "torch CUDA: CUDA not available (3 benchmarks)" in out
    assert status["quick"] is True
    labels = {u["backend"] for u in status["unavailable"]}
    assert "torch CUDA" in labels and any(
        "no_such_backend" in u["reason"] for u in status["unavailable"]
    )
    results = json.loads((bench_dir / "b.json").read_text(encoding="utf-8"))
    assert results["portops"]["unavailable"] == status["unavailable"]
    options = results["benchmarks"][0]["options"]
    assert options["min_rounds"] == 2 and options["max_time"] == 0.001  # quick mode


def test_conftest_selects_backends(bench_dir: Path) -> None:
    rc, out, status = run_pytest(bench_dir, "--quick", "--bench-backends", "torch-cuda")
    assert rc == 0, out
    assert "deselected" in out  # the numpy parameters, at collection
    results = json.loads((bench_dir / "b.json").read_text(encoding="utf-8"))
    assert {b["group"] for b in results["benchmarks"]} == {"toy sum torch cuda"}
    rc, out, _ = run_pytest(bench_dir, "--quick", "--bench-backends", "numpy")
    numpy_results = json.loads((bench_dir / "b.json").read_text(encoding="utf-8"))
    assert "toy sum numpy cpu fwd+bwd" in {b["group"] for b in numpy_results["benchmarks"]}
    assert status["selected"] == ["torch-cuda"]
    assert "torch CUDA" in {u["backend"] for u in status["unavailable"]}
    assert all(u["backend"] != "numpy CPU" for u in status["unavailable"])


def test_conftest_names_expected_backends_that_ran_nothing(bench_dir: Path) -> None:
    rc, out, status = run_pytest(bench_dir, "--quick", "--bench-expect", "numpy,jax-cuda")
    assert rc == 0, out
    assert "jax CUDA: " in out and "(no benchmark ran)" in out
    assert "numpy CPU" in status["ran"]


def test_conftest_require_fails_on_skipped_backend(bench_dir: Path) -> None:
    rc, out, _ = run_pytest(bench_dir, "--quick", "--bench-require", "torch-cuda")
    assert rc == 1 and "is required" in out
    rc, out, _ = run_pytest(bench_dir, "--quick", "--bench-require", "numpy")
    assert rc == 0, out
    rc, out, _ = run_pytest(bench_dir, "--quick", "--bench-require", "dask")
    assert rc == 1 and "dask CPU is required" in out


def test_conftest_fails_a_benchmark_that_breaks_the_convention(bench_dir: Path) -> None:
    bad = "def test_bad(benchmark):\n    benchmark.group = 'toy'\n    benchmark(sum, [1])\n"
    (bench_dir / "benchmarks" / "test_bad.py").write_text(bad, encoding="utf-8")
    rc, out, _ = run_pytest(bench_dir, "--quick")
    assert rc == 1 and "extra_info lacks" in out


def test_conftest_budget_shortens_rounds_and_shows_progress(bench_dir: Path) -> None:
    rc, out, status = run_pytest(bench_dir, "--bench-budget", "1e-9", "--bench-backends", "numpy")
    assert rc == 0, out
    assert "[1/" in out and "s left]" in out and "test_toy.py::test_param" in out
    results = json.loads((bench_dir / "b.json").read_text(encoding="utf-8"))
    assert len(results["benchmarks"]) == 4  # every selected benchmark ran, briefly
    assert all(b["stats"]["total"] < 0.1 for b in results["benchmarks"])  # not 1 s each
    assert not any("budget" in u["reason"] for u in status["unavailable"])
