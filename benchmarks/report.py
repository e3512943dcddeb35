"""Summary tables and chart of the portops benchmarks.

Reads the JSON written by ``pytest benchmarks --benchmark-json=FILE`` and prints, per
operation, one table (its columns are explained in ``COLUMNS``) and the shape sweep
(``SWEEP_TEXT``); a PNG chart shows the same ratios. To set two runs side by side, use
pytest-benchmark's own ``--benchmark-compare``.

Each benchmark describes itself in ``extra_info``: ``op``, ``kind`` (``"portops"``,
``"baseline"`` or ``"roofline"``), ``backend``, ``device`` and a short ``name``. The
portops default of a group is the ``portops`` entry with ``default=True`` in its
``extra_info``; without one, the entry named ``portops`` or ``default``; otherwise the first
``portops`` entry that ran.

Usage::

    python -m benchmarks.report bench-results/bench.json --text report.txt --png report.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIND_ORDER = {"roofline": 0, "portops": 1, "baseline": 2}
DEFAULT_NAMES = ("portops", "default")
# A sweep point misses when portops takes more than this times the best native call,
# and more than MISS_SECONDS longer (per-call overhead on tiny inputs, noise).
MISS_RATIO = 1.1
MISS_SECONDS = 3e-6
COLUMNS = """\
Columns: "median" is the median time of one call (a round of several calls is divided
by its number of calls). "x copy" divides it by the group's roofline entry: for
shift_sum and vecdot a copy of the same bytes (shift_sum: x + y, vecdot: both inputs)
on the same device, timed beside the entry's own rounds where "paired" is said;
for einsum the batched GEMM of the same sizes on contiguous operands. A copy reads
and writes its bytes, so it moves twice what an operation that reads x and writes
a smaller y must move: "x limit" divides instead by the real limit, the bytes the
operation must read and write over the copy's bandwidth ((read + written) / time).
"default speedup" is the other entry's median over the portops default's."""


# --------------------------------------------------------------------------- machine


def cpu_model() -> str:
    """The CPU model of this machine, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def gpu_model(*, import_torch: bool = False) -> str | None:
    """The model of the first CUDA device, or None when there is none.

    Asks torch (``torch.cuda.get_device_name``) when it is already imported, or when
    `import_torch` is set and it is installed; otherwise CuPy when it is imported, then
    ``nvidia-smi``.
    """
    torch = sys.modules.get("torch")
    if torch is None and import_torch:
        try:
            import torch
        except ImportError:
            torch = None
    name = _torch_gpu_name(torch) or _cupy_gpu_name(sys.modules.get("cupy"))
    return name or _nvidia_smi_gpu_name()


def _torch_gpu_name(torch: Any) -> str | None:
    try:
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:  # a broken CUDA setup must not break the report
        return None
    return None


def _cupy_gpu_name(cupy: Any) -> str | None:
    try:
        if cupy is not None:
            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None
    return None


def _nvidia_smi_gpu_name() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return names[0] if names else None


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True, eq=False)
class Entry:
    """One benchmark of a run: a group member with its median time in seconds."""

    group: str
    name: str
    kind: str
    op: str
    backend: str
    device: str
    median: float
    rounds: int = 0
    default: bool = False
    # Median of the roofline copy timed just before each of this entry's rounds.
    paired_roofline: float | None = None
    # Bytes the operation must move (read + written); bytes a roofline copy copies.
    nbytes: int = 0
    copy_bytes: int = 0
    # Sweep points: per-call medians of the native calls and baselines beside it.
    native: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    """A benchmark run: its entries and where and how it ran."""

    entries: list[Entry]
    cpu: str | None = None
    cores: int | None = None
    gpu: str | None = None
    quick: bool = False
    when: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    unavailable: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""


def entry_from_json(bench: dict[str, Any]) -> Entry:
    """An `Entry` from one item of pytest-benchmark's ``benchmarks`` list."""
    extra = bench.get("extra_info") or {}
    group = str(bench.get("group") or extra.get("group") or bench.get("name", ""))
    op = str(extra.get("op") or (group.split() or ["?"])[0])
    parts = group.split()
    calls = max(1, int(extra.get("calls") or 1))
    median = float(bench["stats"]["median"]) / calls
    native = dict(extra.get("native") or {})
    rerun = dict(extra.get("rerun") or {})  # a sweep point that missed, measured again
    if rerun:
        median = rerun.pop("portops", median)
        native = rerun
    return Entry(
        group=group,
        name=str(extra.get("name") or bench.get("name", "?")),
        kind=str(extra.get("kind", "?")),
        op=op,
        backend=str(extra.get("backend") or (parts[-2] if len(parts) >= 4 else "?")),
        device=str(extra.get("device") or (parts[-1] if len(parts) >= 4 else "?")),
        median=median,
        rounds=int(bench["stats"].get("rounds", 0)),
        default=bool(extra.get("default", False)),
        paired_roofline=_positive(extra.get("paired_roofline")),
        nbytes=int(extra.get("bytes") or 0),
        copy_bytes=int(extra.get("copy_bytes") or 0),
        native=native,
        baseline=dict(extra.get("baseline") or {}),
    )


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def run_from_json(data: dict[str, Any], status: dict[str, Any] | None = None) -> Run:
    """A `Run` from pytest-benchmark's JSON and the status the benchmark conftest wrote.

    `status` defaults to the ``portops`` key that the conftest adds to the JSON.
    """
    status = status if status is not None else data.get("portops") or {}
    machine = status.get("machine") or {}
    cpu_info = (data.get("machine_info") or {}).get("cpu") or {}
    return Run(
        entries=[entry_from_json(b) for b in data.get("benchmarks", [])],
        cpu=machine.get("cpu") or cpu_info.get("brand_raw"),
        cores=machine.get("cores") or cpu_info.get("count"),
        gpu=machine.get("gpu"),
        quick=bool(status.get("quick", False)),
        when=status.get("when") or data.get("datetime"),
        versions=dict(status.get("versions") or {}),
        unavailable=list(status.get("unavailable") or []),
    )


def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The results JSON, or ``{}`` when there are none.

    pytest-benchmark creates the ``--benchmark-json`` file when it starts and leaves it
    empty when no benchmark ran.
    """
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return {}
    data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return data


def has_results(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds the results of at least one benchmark."""
    return bool(read_results(path).get("benchmarks"))


def load_run(
    path: str | os.PathLike[str], status_path: str | os.PathLike[str] | None = None
) -> Run:
    """Load a run from a results JSON file and, when given and present, a status file.

    A missing results file gives a run without entries (every benchmark skipped): the
    status file still says why.
    """
    status = None
    if status_path is not None and Path(status_path).is_file():
        status = json.loads(Path(status_path).read_text(encoding="utf-8"))
    run = run_from_json(read_results(path), status)
    run.source = os.fspath(path)
    return run


# --------------------------------------------------------------------------- table maths


@dataclass(frozen=True)
class Row:
    """A table row: an entry, its ratio to the roofline and the default's speedup over it."""

    entry: Entry
    roofline_ratio: float | None
    speedup: float | None
    is_default: bool = False
    limit_ratio: float | None = None


@dataclass
class GroupTable:
    """The rows of one benchmark group, roofline first, then portops, then baselines."""

    group: str
    op: str
    rows: list[Row]
    roofline: Entry | None
    default: Entry | None
    notes: list[str] = field(default_factory=list)


def group_entries(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """Entries by group, groups in the order they ran."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.group, []).append(entry)
    return groups


def pick_default(entries: Sequence[Entry]) -> Entry | None:
    """The portops default among a group's entries (see the module docstring)."""
    portops = [e for e in entries if e.kind == "portops"]
    marked = [e for e in portops if e.default]
    named = [e for e in portops if e.name.lower() in DEFAULT_NAMES]
    for candidates in (marked, named, portops):
        if candidates:
            return candidates[0]
    return None


def summarise_group(group: str, entries: Sequence[Entry]) -> GroupTable:
    """Ratios to the roofline and speedups of the default for one group."""
    notes: list[str] = []
    rooflines = [e for e in entries if e.kind == "roofline"]
    roofline = min(rooflines, key=lambda e: e.median) if rooflines else None
    if not rooflines:
        notes.append(f"{group}: no roofline entry, ratios to the roofline are not shown")
    elif len(rooflines) > 1:
        notes.append(f"{group}: {len(rooflines)} roofline entries, the fastest is used")
    default = pick_default(entries)
    if default is None:
        notes.append(f"{group}: no portops entry, speedups are not shown")
    unknown = sorted({e.kind for e in entries if e.kind not in KIND_ORDER})
    if unknown:
        notes.append(f"{group}: unknown kind(s) {', '.join(unknown)}")

    def ratio(e: Entry) -> float | None:
        # A copy timed between the entry's own rounds saw the machine as the entry did.
        if e.paired_roofline is not None and e.kind != "roofline":
            return _safe_div(e.median, e.paired_roofline)
        return _safe_div(e.median, roofline.median) if roofline is not None else None

    def speedup(e: Entry) -> float | None:
        if default is None or e is default or e.kind == "roofline":
            return None
        return _safe_div(e.median, default.median)

    def limit(e: Entry) -> float | None:
        # The real limit: the bytes e must move at the copy's (read + written) bandwidth.
        r = ratio(e)
        if r is None or roofline is None or not (e.nbytes and roofline.copy_bytes):
            return None
        return r * 2 * roofline.copy_bytes / e.nbytes

    ordered = sorted(entries, key=lambda e: (KIND_ORDER.get(e.kind, 3), e is not default, e.median))
    rows = [Row(e, ratio(e), speedup(e), e is default, limit(e)) for e in ordered]
    op = entries[0].op if entries else group.split()[0]
    return GroupTable(group, op, rows, roofline, default, notes)


def _safe_div(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def tables_by_op(entries: Iterable[Entry]) -> dict[str, list[GroupTable]]:
    """Group tables, collected per operation in the order the operations ran."""
    tables: dict[str, list[GroupTable]] = {}
    for group, members in group_entries(e for e in entries if not e.native).items():
        table = summarise_group(group, members)
        tables.setdefault(table.op, []).append(table)
    return tables


# --------------------------------------------------------------------------- text


def format_time(seconds: float | None) -> str:
    """A duration with a unit and three significant digits, e.g. ``12.3 ms``."""
    if seconds is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{_three_digits(seconds / scale)} {unit}"
    return f"{_three_digits(seconds / 1e-9)} ns"


def format_factor(value: float | None) -> str:
    """A ratio such as ``1.23x``, ``12.3x`` or ``270x``; ``—`` when unknown."""
    return "—" if value is None else f"{_three_digits(value)}x"


def _three_digits(value: float) -> str:
    if value < 0.1:
        return f"{value:.2g}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown pipe table, padded so that it also reads well in a terminal."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _group_label(group: str, op: str) -> str:
    return group[len(op) :].strip() if group.startswith(op + " ") else group


def op_table(op: str, tables: Sequence[GroupTable]) -> str:
    """The text table of one operation."""
    headers = ["group", "name", "kind", "median", "x copy", "x limit", "default speedup"]
    rows = []
    for table in tables:
        for i, row in enumerate(table.rows):
            name = row.entry.name + (" (default)" if row.is_default else "")
            paired = " paired" if row.entry.paired_roofline and row.entry.kind != "roofline" else ""
            rows.append(
                [
                    _group_label(table.group, op) if i == 0 else "",
                    name,
                    row.entry.kind,
                    format_time(row.entry.median),
                    format_factor(row.roofline_ratio) + paired,
                    format_factor(row.limit_ratio),
                    format_factor(row.speedup),
                ]
            )
    notes = [f"  note: {n}" for t in tables for n in t.notes]
    return "\n".join([f"## {op}", "", render_table(headers, rows), *notes])


def header(run: Run) -> str:
    """Where and how the run was made: CPU and GPU model, versions, mode."""
    lines = ["# portops benchmarks", ""]
    when = f" ({run.when})" if run.when else ""
    lines.append(f"results: {run.source or '?'}{when}")
    if run.quick:
        lines.append("mode: quick (tiny sizes, 1-2 rounds: shows that they run, not timings)")
    cores = f" ({run.cores} logical cores)" if run.cores else ""
    lines.append(f"CPU: {run.cpu or 'unknown'}{cores}")
    lines.append(f"GPU: {run.gpu or 'none detected'}")
    if run.versions:
        lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(run.versions.items())))
    return "\n".join(lines)


def unavailable_section(run: Run) -> str:
    """The backends (or benchmarks) that could not run, each with its reason."""
    if not run.unavailable:
        return "Every selected backend ran."
    lines = ["Could not run:"]
    for item in run.unavailable:
        count = int(item.get("count", 1))
        what = "no benchmark ran" if count == 0 else f"{count} benchmark{'s' * (count != 1)}"
        lines.append(f"  - {item.get('backend', '?')}: {item.get('reason', '?')} ({what})")
    return "\n".join(lines)


def sweep_points(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """The sweep points (entries with native calls beside them), per "<op> <backend>"."""
    points: dict[str, list[Entry]] = {}
    for e in entries:
        if e.native:
            points.setdefault(f"{e.op} {e.backend}", []).append(e)
    return points


def best_native(e: Entry) -> tuple[str, float]:
    """(name, per-call median) of the fastest native call beside sweep point `e`."""
    name = min(e.native, key=lambda k: e.native[k])
    return name, e.native[name]


def is_miss(e: Entry) -> bool:
    """Whether portops is slower than the best native call by more than the margins."""
    best = best_native(e)[1]
    return e.median > max(MISS_RATIO * best, best + MISS_SECONDS)


SWEEP_TEXT = f"""\
Each sweep point times portops' default and every native call of the same library
(and the seed baselines) in interleaved rounds; "ratio" is portops / the best native
call (below 1: portops is faster). A point is a miss when portops takes more than
{MISS_RATIO}x the best native call and more than {MISS_SECONDS * 1e6:g} us longer; a
point that misses is measured once more, and the second measurement is shown."""


def sweep_summary(points: Sequence[Entry]) -> str:
    """Points, misses, the worst ratio and the geometric-mean speedup over the best native."""
    ratios = [e.median / best_native(e)[1] for e in points]
    geo = math.exp(-sum(math.log(r) for r in ratios) / len(ratios))
    misses = sum(is_miss(e) for e in points)
    return (
        f"{len(points)} points, {misses} miss{'es' * (misses != 1)}, worst ratio "
        f"{format_factor(max(ratios))}, geometric-mean speedup over the best native "
        f"{format_factor(geo)}"
    )


def sweep_table(key: str, points: Sequence[Entry]) -> str:
    """The sweep table of one "<op> <backend>": a row per point."""
    baselines = sorted({k for e in points for k in e.baseline})
    headers = ["point", "portops", "best native", "ratio", *baselines]
    rows = []
    for e in points:
        name, best = best_native(e)
        ratio = format_factor(e.median / best) + (" MISS" if is_miss(e) else "")
        cells = [format_time(e.baseline.get(b)) for b in baselines]
        rows.append([e.name, format_time(e.median), f"{format_time(best)} {name}", ratio, *cells])
    title = f"## {key}: sweep ({sweep_summary(points)})"
    return "\n".join([title, "", render_table(headers, rows)])


def report_text(run: Run) -> str:
    """The whole report: header, one table per operation, the sweep, what could not run."""
    parts = [header(run), COLUMNS]
    tables = tables_by_op(run.entries)
    points = sweep_points(run.entries)
    if not tables and not points:
        parts.append("No benchmark ran.")
    parts.extend(op_table(op, op_tables) for op, op_tables in tables.items())
    if points:
        parts.append(SWEEP_TEXT)
        parts.extend(sweep_table(key, p) for key, p in points.items())
    parts.append(unavailable_section(run))
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- chart

KIND_COLOURS = {"roofline": "0.55", "portops": "tab:blue", "baseline": "tab:orange"}


def write_chart(run: Run, path: str | os.PathLike[str]) -> Path:
    """Write a PNG chart: per operation, each entry's ratio to its group's roofline
    (groups without one by median time), then per operation and library a scatter of
    the sweep: portops / best native call against the bytes each point moves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = _chart_panels(tables_by_op(run.entries))
    points = sweep_points(run.entries)
    heights = [max(1.5, 0.28 * len(rows) + 0.9) for _, _, rows in panels]
    heights += [3.0] * len(points)
    fig, axes = plt.subplots(
        max(1, len(heights)),
        1,
        figsize=(10, sum(heights or [1.5]) + 1.0),
        height_ratios=heights or None,
        squeeze=False,
        layout="constrained",
    )
    for ax, (title, by_ratio, rows) in zip(axes[:, 0], panels, strict=False):
        _draw_panel(ax, title, by_ratio, rows)
    for ax, (key, sweep) in zip(axes[len(panels) :, 0], points.items(), strict=False):
        _draw_sweep(ax, key, sweep)
    if not panels and not points:
        axes[0, 0].text(0.5, 0.5, "no benchmark ran", ha="center", va="center")
        axes[0, 0].set_axis_off()
    gpu = f", GPU: {run.gpu}" if run.gpu else ""
    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items()]
    fig.legend(handles=handles, loc="outside upper right", fontsize=7, ncols=3)
    fig.suptitle(f"portops benchmarks (CPU: {run.cpu or '?'}{gpu})", fontsize=10)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _draw_sweep(ax: Any, key: str, points: Sequence[Entry]) -> None:
    ratios = [e.median / best_native(e)[1] for e in points]
    sizes = [max(e.nbytes, 1) for e in points]
    colours = ["tab:red" if is_miss(e) else "tab:blue" for e in points]
    ax.scatter(sizes, ratios, c=colours, s=14)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(MISS_RATIO, color="tab:red", linewidth=0.6, linestyle="--")
    ax.set_xlabel("bytes of the inputs")
    ax.set_ylabel("portops / best native")
    ax.set_title(f"{key} sweep: {sweep_summary(points)} (red: misses)", fontsize=9, loc="left")


def _chart_panels(
    tables: dict[str, list[GroupTable]],
) -> list[tuple[str, bool, list[tuple[str, Row]]]]:
    """(title, drawn by roofline ratio?, labelled rows) for each chart panel."""
    panels = []
    for op, op_tables in tables.items():
        with_roof = [t for t in op_tables if t.roofline is not None]
        without = [t for t in op_tables if t.roofline is None]
        for subset, by_ratio, suffix in ((with_roof, True, ""), (without, False, " (no roofline)")):
            rows = [
                (f"{_group_label(t.group, op)} · {r.entry.name}", r) for t in subset for r in t.rows
            ]
            if rows:
                panels.append((op + suffix, by_ratio, rows))
    return panels


def _draw_panel(
    ax: Any,
    title: str,
    by_ratio: bool,
    rows: list[tuple[str, Row]],
) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = [(r.roofline_ratio if by_ratio else r.entry.median * 1e3) or 0.0 for _, r in rows]
    colours = [KIND_COLOURS.get(r.entry.kind, "tab:gray") for _, r in rows]
    y = list(range(len(rows)))
    ax.barh(y, values, color=colours, edgecolor=["k" if r.is_default else "none" for _, r in rows])
    ax.set_yticks(y, [label for label, _ in rows], fontsize=7)
    ax.invert_yaxis()
    if all(v > 0 for v in values):
        ax.set_xscale("log")
        decades = math.log10(max(values) / min(values))
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades < 2 else (1.0,)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    for yi, value in zip(y, values, strict=True):
        ax.text(value, yi, f" {_three_digits(value)}", va="center", fontsize=6)
    if by_ratio:
        ax.axvline(1.0, color="k", linewidth=0.8)
    ax.set_xlabel("time / roofline time (lower is better)" if by_ratio else "median time [ms]")
    ax.set_title(title, fontsize=9, loc="left")


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("results", help="pytest-benchmark JSON (--benchmark-json) of the run")
    p.add_argument("--status", help="status JSON written by --bench-status (default: in results)")
    p.add_argument("--text", help="also write the report to this text file")
    p.add_argument("--png", help="write the chart to this PNG file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; write the text file and chart when asked. Returns the exit status."""
    args = build_parser().parse_args(argv)
    if not has_results(args.results) and not (args.status and Path(args.status).is_file()):
        print(f"no results at {args.results}: did any benchmark run?", file=sys.stderr)
        return 1
    run = load_run(args.results, args.status)
    text = report_text(run)
    print(text, end="")
    if args.text:
        Path(args.text).parent.mkdir(parents=True, exist_ok=True)
        Path(args.text).write_text(text, encoding="utf-8")
        print(f"tables written to {args.text}")
    if args.png:
        print(f"chart written to {write_chart(run, args.png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
