"""Summary tables, chart and run-to-run comparison of the portops benchmarks.

Reads the JSON written by ``pytest benchmarks --benchmark-json=FILE`` and prints, per
operation, one table: for each benchmark group (``"<op> <case> <backend> <device>"``) the
median time of every entry, its ratio to the group's roofline, and the speedup of the
portops default over every other entry (``other median / default median``). An entry
whose ``extra_info`` holds ``paired_roofline`` (seconds: the median of a roofline copy
timed just before each of its rounds) is divided by that instead, so a machine whose
speed drifts during a run moves both sides of the ratio alike. A PNG chart
shows the same ratios, and ``--compare OLD.json`` sets the run against a saved earlier one.

Each benchmark describes itself in ``extra_info``: ``op``, ``kind`` (``"portops"``,
``"baseline"`` or ``"roofline"``), ``backend``, ``device`` and a short ``name``. The
portops default of a group is the ``portops`` entry with ``default=True`` in its
``extra_info``; without one, the entry named ``portops`` or ``default``; otherwise the first
``portops`` entry that ran.

Usage::

    python -m benchmarks.report bench-results/bench.json
    python -m benchmarks.report NEW.json --compare OLD.json --text report.txt --png report.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIND_ORDER = {"roofline": 0, "portops": 1, "baseline": 2}
DEFAULT_NAMES = ("portops", "default")
# A change of the median by more than this factor is flagged in the comparison.
CHANGE_THRESHOLD = 1.10


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


@dataclass(frozen=True)
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

    @property
    def key(self) -> tuple[str, str]:
        """What identifies this benchmark across runs."""
        return (self.group, self.name)


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
    return Entry(
        group=group,
        name=str(extra.get("name") or bench.get("name", "?")),
        kind=str(extra.get("kind", "?")),
        op=op,
        backend=str(extra.get("backend") or (parts[-2] if len(parts) >= 4 else "?")),
        device=str(extra.get("device") or (parts[-1] if len(parts) >= 4 else "?")),
        median=float(bench["stats"]["median"]),
        rounds=int(bench["stats"].get("rounds", 0)),
        default=bool(extra.get("default", False)),
        paired_roofline=_positive(extra.get("paired_roofline")),
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

    ordered = sorted(entries, key=lambda e: (KIND_ORDER.get(e.kind, 3), e is not default, e.median))
    rows = [Row(e, ratio(e), speedup(e), e is default) for e in ordered]
    op = entries[0].op if entries else group.split()[0]
    return GroupTable(group, op, rows, roofline, default, notes)


def _safe_div(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def tables_by_op(entries: Iterable[Entry]) -> dict[str, list[GroupTable]]:
    """Group tables, collected per operation in the order the operations ran."""
    tables: dict[str, list[GroupTable]] = {}
    for group, members in group_entries(entries).items():
        table = summarise_group(group, members)
        tables.setdefault(table.op, []).append(table)
    return tables


@dataclass(frozen=True)
class Change:
    """One benchmark in two runs; `old` or `new` is None when it is only in one."""

    group: str
    name: str
    kind: str
    old: float | None
    new: float | None
    old_ratio: float | None
    new_ratio: float | None

    @property
    def factor(self) -> float | None:
        """new median / old median: below 1 is faster."""
        if self.old is None or self.new is None:
            return None
        return _safe_div(self.new, self.old)


def compare_runs(new: Run, old: Run) -> dict[str, list[Change]]:
    """Per operation, every benchmark of either run with its median in both."""
    old_rows = _rows_by_key(old.entries)
    new_rows = _rows_by_key(new.entries)
    changes: dict[str, list[Change]] = {}
    for key in list(new_rows) + [k for k in old_rows if k not in new_rows]:
        n, o = new_rows.get(key), old_rows.get(key)
        ref = (n or o).entry  # type: ignore[union-attr]
        changes.setdefault(ref.op, []).append(
            Change(
                group=ref.group,
                name=ref.name,
                kind=ref.kind,
                old=o.entry.median if o else None,
                new=n.entry.median if n else None,
                old_ratio=o.roofline_ratio if o else None,
                new_ratio=n.roofline_ratio if n else None,
            )
        )
    return changes


def _rows_by_key(entries: Iterable[Entry]) -> dict[tuple[str, str], Row]:
    rows: dict[tuple[str, str], Row] = {}
    for tables in tables_by_op(entries).values():
        for table in tables:
            for row in table.rows:
                rows.setdefault(row.entry.key, row)
    return rows


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
    headers = ["group", "name", "kind", "median", "x roofline", "default speedup"]
    rows = []
    for table in tables:
        for i, row in enumerate(table.rows):
            name = row.entry.name + (" (default)" if row.is_default else "")
            rows.append(
                [
                    _group_label(table.group, op) if i == 0 else "",
                    name,
                    row.entry.kind,
                    format_time(row.entry.median),
                    format_factor(row.roofline_ratio),
                    format_factor(row.speedup),
                ]
            )
    notes = [f"  note: {n}" for t in tables for n in t.notes]
    return "\n".join([f"## {op}", "", render_table(headers, rows), *notes])


def compare_table(op: str, changes: Sequence[Change]) -> str:
    """The text table of one operation's changes between two runs."""
    headers = ["group", "name", "kind", "old", "new", "new/old", "x roofline old -> new"]
    rows = []
    previous_group = None
    for c in changes:
        rows.append(
            [
                _group_label(c.group, op) if c.group != previous_group else "",
                c.name,
                c.kind,
                format_time(c.old),
                format_time(c.new),
                _format_change(c),
                f"{format_factor(c.old_ratio)} -> {format_factor(c.new_ratio)}",
            ]
        )
        previous_group = c.group
    return "\n".join([f"## {op}: change", "", render_table(headers, rows)])


def _format_change(change: Change) -> str:
    if change.old is None:
        return "only in new"
    if change.new is None:
        return "only in old"
    factor = change.factor
    text = format_factor(factor)
    if factor is not None and factor > CHANGE_THRESHOLD:
        text += " slower"
    elif factor is not None and factor < 1 / CHANGE_THRESHOLD:
        text += " faster"
    return text


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


def comparison_warnings(new: Run, old: Run) -> list[str]:
    """Reasons why the two runs' times may not be comparable."""
    warnings = []
    if new.quick != old.quick:
        warnings.append("one run is in quick mode and the other is not")
    if new.cpu and old.cpu and new.cpu != old.cpu:
        warnings.append(f"different CPUs: {old.cpu} -> {new.cpu}")
    if new.gpu != old.gpu:
        warnings.append(f"different GPUs: {old.gpu or 'none'} -> {new.gpu or 'none'}")
    return warnings


def comparable(new: Run, old: Run) -> bool:
    """Whether two runs were made in the same mode on the same machine."""
    return not comparison_warnings(new, old)


def report_text(run: Run, old: Run | None = None) -> str:
    """The whole report: header, one table per operation, what could not run, changes."""
    parts = [header(run)]
    tables = tables_by_op(run.entries)
    if not tables:
        parts.append("No benchmark ran.")
    parts.extend(op_table(op, op_tables) for op, op_tables in tables.items())
    parts.append(unavailable_section(run))
    if old is not None:
        parts.append(f"# Change against {old.source or 'the earlier run'} ({old.when or '?'})")
        parts.extend(f"warning: {w}" for w in comparison_warnings(run, old))
        changes = compare_runs(run, old)
        parts.extend(compare_table(op, op_changes) for op, op_changes in changes.items())
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- chart

KIND_COLOURS = {"roofline": "0.55", "portops": "tab:blue", "baseline": "tab:orange"}


def write_chart(run: Run, path: str | os.PathLike[str], old: Run | None = None) -> Path:
    """Write a PNG chart: per operation, each entry's ratio to its group's roofline.

    Groups without a roofline are drawn by median time on their own axis. With `old`,
    a black tick marks each entry's ratio in the earlier run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = _chart_panels(tables_by_op(run.entries))
    old_ratios = {k: r.roofline_ratio for k, r in _rows_by_key(old.entries).items()} if old else {}
    heights = [max(1.5, 0.28 * len(rows) + 0.9) for _, _, rows in panels] or [1.5]
    fig, axes = plt.subplots(
        len(heights), 1, figsize=(10, sum(heights) + 0.8), height_ratios=heights, squeeze=False
    )
    for ax, (title, by_ratio, rows) in zip(axes[:, 0], panels, strict=False):
        _draw_panel(ax, title, by_ratio, rows, old_ratios)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no benchmark ran", ha="center", va="center")
        axes[0, 0].set_axis_off()
    gpu = f", GPU: {run.gpu}" if run.gpu else ""
    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncols=3)
    fig.suptitle(f"portops benchmarks (CPU: {run.cpu or '?'}{gpu})", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


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
    old_ratios: dict[tuple[str, str], float | None],
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
        old = [(yi, old_ratios.get(r.entry.key)) for yi, (_, r) in zip(y, rows, strict=True)]
        old = [(yi, v) for yi, v in old if v]
        if old:
            ax.scatter([v for _, v in old], [yi for yi, _ in old], marker="|", color="k", s=80)
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
    p.add_argument("--compare", metavar="OLD.json", help="show the change against this run")
    p.add_argument(
        "--previous",
        metavar="OLD.json",
        help="like --compare, but only when it exists and ran in the same mode on the same machine",
    )
    p.add_argument("--previous-status", help="status JSON of --previous/--compare")
    p.add_argument("--text", help="also write the report to this text file")
    p.add_argument("--png", help="write the chart to this PNG file")
    return p


def _load_old(args: argparse.Namespace, run: Run, say: Callable[[str], None]) -> Run | None:
    if args.compare:
        if not Path(args.compare).is_file():
            raise SystemExit(f"--compare: no such file: {args.compare}")
        return load_run(args.compare, args.previous_status)
    if args.previous and Path(args.previous).is_file():
        old = load_run(args.previous, args.previous_status)
        if old.entries and comparable(run, old):
            return old
        why = "; ".join(comparison_warnings(run, old)) or "it has no results"
        say(f"(not comparing with {args.previous}: {why})")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; write the text file and chart when asked. Returns the exit status."""
    args = build_parser().parse_args(argv)
    if not has_results(args.results) and not (args.status and Path(args.status).is_file()):
        print(f"no results at {args.results}: did any benchmark run?", file=sys.stderr)
        return 1
    run = load_run(args.results, args.status)
    notes: list[str] = []
    old = _load_old(args, run, notes.append)
    text = report_text(run, old) + "".join(n + "\n" for n in notes)
    print(text, end="")
    if args.text:
        Path(args.text).parent.mkdir(parents=True, exist_ok=True)
        Path(args.text).write_text(text, encoding="utf-8")
        print(f"tables written to {args.text}")
    if args.png:
        print(f"chart written to {write_chart(run, args.png, old)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
