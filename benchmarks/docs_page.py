"""The documentation's performance results, generated from benchmark JSON.

The Performance page (``docs/performance.rst``) includes ``generated/performance_results.inc``,
which ``docs/conf.py`` writes with :func:`write` at every build: per machine, the latest
run's chart and headline table; then the history of every recorded run. The runs are the
recorded ones (``docs/benchmark_runs/*.json``, added with ``--record`` after a run on a
quiet machine) and this machine's last ``nox -s bench`` (``bench-results/bench.json``).

Usage::

    python -m benchmarks.docs_page --record bench-results/bench.json  # keep a run
    python -m benchmarks.docs_page [--out DIR] [RUN.json ...]         # write the page part
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.ratios import geometric_mean

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "docs" / "benchmark_runs"
LATEST = ROOT / "bench-results" / "bench.json"
INCLUDE = "performance_results.inc"


def runs(paths: Sequence[Path] | None = None) -> list[dict[str, Any]]:
    """The runs to show, oldest first: the recorded ones and this machine's latest."""
    if paths is None:
        paths = [*sorted(RECORDED.glob("*.json")), *([LATEST] if LATEST.is_file() else [])]
    loaded = [report.load(p) for p in paths]
    found = [r for r in loaded if r["comparisons"]]
    for r in found:
        r["recorded"] = Path(r["source"]).parent == RECORDED
    return sorted(found, key=lambda r: r.get("datetime") or "")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def record(path: Path, into: Path = RECORDED) -> Path:
    """Keep a run in the history: its JSON without pytest-benchmark's copies of the
    rounds (each comparison keeps every candidate's, to four digits), named by date and
    machine."""
    data = json.loads(path.read_text("utf-8"))
    for b in data.get("benchmarks", []):
        (b.get("stats") or {}).pop("data", None)
        for c in (b.get("extra_info") or {}).get("candidates", {}).values():
            c["times"] = [None if t is None else float(f"{t:.4g}") for t in c["times"]]
    run = report.load(path)
    name = f"{(data.get('datetime') or 'undated')[:10]}-{slug(report.machine_line(run))}.json"
    into.mkdir(parents=True, exist_ok=True)
    (into / name).write_text(json.dumps(data, separators=(",", ":")) + "\n", "utf-8")
    return into / name


def list_table(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: str = "") -> str:
    """A reST list-table."""
    lines = [".. list-table::", "   :header-rows: 1"]
    lines += [f"   :widths: {widths}"] if widths else []
    lines.append("")
    for row in [headers, *rows]:
        lines.append(f"   * - {row[0] or ' '}")
        lines += [f"     - {cell or ' '}" for cell in row[1:]]
    return "\n".join(lines)


def literal(text: str) -> str:
    """Inline code for names such as ``(a*b).sum``, whose characters reST would read."""
    return f"``{text}``" if text and text != "—" else text


def run_heading(run: dict[str, Any]) -> str:
    status = run.get("portops") or {}
    modes = [m for m in ("full", "sweep") if status.get(m)]
    where = (
        "recorded run"
        if run.get("recorded")
        else "the last run on the machine that built these pages"
    )
    when = (run.get("datetime") or "")[:16].replace("T", " ")
    length = f", {status['seconds']:.0f} s" if status.get("seconds") else ""
    mode = f"``nox -s bench{' -- --' + ' --'.join(modes) if modes else ''}``"
    return f"{when} UTC, {where}: {mode}{length}, {report.load_line(run)}."


def headline_section(run: dict[str, Any], chart: str | None) -> str:
    """A run's heading, chart, headline table and sweep summary."""
    headers, rows = report.headline_rows(run)
    for row in rows:  # the methods' names as inline code
        row[2] = ", ".join(map(_code_names, row[2].split(", ")))
        row[3] = _code_names(row[3])
    parts = [run_heading(run)]
    if chart:
        figure = f".. figure:: /generated/{chart}\n   :width: 100%\n   :alt: speedup chart\n"
        parts.append(figure + f"   :target: ../_images/{chart}\n\n   Click for the full size.")
    if rows:
        parts.append(list_table(headers, rows, "30 12 30 18 10 8"))
    groups = report.sweep_groups(run["comparisons"])
    if groups:
        every = [c for points in groups.values() for c in points]
        sweep_rows = []
        for key, points in [*groups.items(), ("every sweep", every)]:
            s = report.sweep_stats(points)
            misses = " / ".join(str(n) for n in s["misses"].values())
            sweep_rows.append([key, str(s["points"]), misses])
            sweep_rows[-1] += [report.factor(s["worst"]), report.factor(s["speedup"])]
        thresholds = " / ".join(f"{r}x" for r in report.MISS_RATIOS)
        headers = ["sweep", "points", f"misses at {thresholds}", "worst ratio"]
        parts.append(list_table([*headers, "geometric-mean speedup"], sweep_rows))
    return "\n\n".join(parts)


def _code_names(cell: str) -> str:
    """``1.31x ±4% slice-add loop`` -> the method's name as inline code."""
    m = re.match(r"^(\S+x(?: ±\S+)?(?: noisy)?) (.+)$", cell)
    return f"{m.group(1)} {literal(m.group(2))}" if m else cell


def history_row(run: dict[str, Any]) -> list[str]:
    headline = [c for c in run["comparisons"] if c.headline]
    seeds = [c.speedup(n).median for c in headline for n in c.named("baseline")]
    natives = [c.speedup(b).median for c in headline if (b := c.best_native())]

    def summary(values: list[float]) -> str:
        if not values:
            return "—"
        return f"{report.factor(geometric_mean(values))} (lowest {report.factor(min(values))})"

    groups = report.sweep_groups(run["comparisons"])
    every = [c for points in groups.values() for c in points]
    sweep = "—"
    if every:
        s = report.sweep_stats(every)
        misses = " / ".join(str(n) for n in s["misses"].values())
        sweep = f"{s['points']} points, {misses} misses, {report.factor(s['speedup'])}"
    when = (run.get("datetime") or "")[:10]
    return [
        when,
        report.machine_line(run),
        report.load_line(run),
        summary(seeds),
        summary(natives),
        sweep,
    ]


def text(found: list[dict[str, Any]], charts: dict[int, str]) -> str:
    """The included reST: a section per machine (its latest run), then the history."""
    if not found:
        return (
            ".. note::\n\n   No benchmark results on the machine that built these pages. Run "
            "``nox -s bench`` (it writes ``bench-results/bench.json``), then ``nox -s docs``.\n"
        )
    latest: dict[str, dict[str, Any]] = {}
    for run in found:
        latest[report.machine_line(run)] = run  # oldest first: the last one stays
    parts = []
    for machine, run in latest.items():
        parts.append(f"{machine}\n{'~' * len(machine)}")
        parts.append(headline_section(run, charts.get(id(run))))
    thresholds = " / ".join(f"{r}x" for r in report.MISS_RATIOS)
    headers = ["date", "machine", "load", "speedup over the seed methods", "over the best native"]
    headers.append(f"sweep (misses at {thresholds}, speedup)")
    history = list_table(headers, [history_row(r) for r in reversed(found)], "10 22 12 18 18 20")
    parts.append(f"History\n~~~~~~~\n\nEvery run shown here, newest first; speedups are geometric "
                 f"means over the headline comparisons.\n\n{history}")  # fmt: skip
    return "\n\n".join(parts) + "\n"


def write(out: Path, paths: Sequence[Path] | None = None) -> Path:
    """Write ``<out>/performance_results.inc`` and the charts it shows; returns the file."""
    from benchmarks.chart import write_chart

    out.mkdir(parents=True, exist_ok=True)
    found = runs(paths)
    latest = {report.machine_line(r): r for r in found}
    charts = {}
    for machine, run in latest.items():
        name = f"performance-{slug(machine)}.png"
        write_chart(run, out / name)
        charts[id(run)] = name
    target = out / INCLUDE
    target.write_text(text(found, charts), "utf-8")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs_page", description=__doc__)
    parser.add_argument("runs", nargs="*", type=Path, help="bench JSON files (default: see above)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "generated")
    parser.add_argument("--record", action="store_true", help="keep the runs in the history")
    args = parser.parse_args(argv)
    if args.record:
        for path in args.runs or [LATEST]:
            print(f"recorded: {record(path)}")
        return 0
    print(f"written: {write(args.out, args.runs or None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
