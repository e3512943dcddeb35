"""What pytest-benchmark does not show, from its JSON and each benchmark's ``extra_info``
(``benchmarks/conftest.py``): a table of ratios per operation, the shape sweep, a chart.
Usage: ``python -m benchmarks.report bench.json --text bench.txt --png bench.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KINDS = {"copy": 0, "default": 1, "native": 2, "baseline": 3}  # the order of a group's rows
# A sweep point misses when portops takes more than MISS_RATIO times the best native call
# and more than MISS_SECONDS longer (per-call overhead on tiny inputs, noise). Such a
# point is measured once more (benchmarks/sweep.py), in RERUN_ROUNDS times the rounds: on
# a 2-core VM the rounds of one call swing by 20% (torch.linalg.vecdot, 10^6x2
# transposed: 1.31-1.80 ms in 15 rounds), and the medians of seven rounds of two
# candidates making that very call differed by as much.
MISS_RATIO, MISS_SECONDS = 1.1, 3e-6
RERUN_ROUNDS = 3
COLUMNS = """\
Columns: "median" is the median time of one call. "x copy": that time over a copy of the
group's bytes on the same device (its "copy" rows; "paired": a copy timed just before each
of the entry's rounds, so that both saw the machine alike). A copy reads and writes its
bytes, twice what an op that reads x and writes a smaller y must move: "x limit" is the
time over the op's real limit, the bytes it must read and write at the copy's bandwidth
counted as (bytes read + written) / time. "default speedup": the entry's median over the
portops default's ("native": a call of the same library; "baseline": a seed's loop, a
peer's code or another implementation)."""
SWEEP_TEXT = f"""\
Sweep: each point times portops' default and every native call of the same library (and
the seed baselines) in interleaved rounds; "ratio" is portops / the best native call
(below 1: portops is faster). A point misses when portops takes over {MISS_RATIO}x the best
native call and over {MISS_SECONDS * 1e6:g} us more; such a point is measured once more,
in {RERUN_ROUNDS} times as many rounds, portops then taking its turn among the natives in
their shuffled order, and the second measurement is shown."""


def load(path: str | Path) -> dict[str, Any]:
    """pytest-benchmark's JSON with ``entries``: each ``extra_info`` with its ``group``, the
    ``median`` of one call and, at a sweep point, the ``best`` native, ``ratio``, ``miss``."""
    p = Path(path)
    data: dict[str, Any] = json.loads(p.read_text("utf-8") or "{}") if p.is_file() else {}
    data["entries"], data["source"] = [], str(p)
    for b in data.get("benchmarks", []):
        e = {"op": "?", "case": "?", "backend": "?", "device": "?", "kind": "?", "name": b["name"]}
        e |= {"bytes": 0, "copy_bytes": 0, "native": {}, "baseline": {}} | b["extra_info"]
        e["group"] = b.get("group") or b["name"]
        e["median"] = b["stats"]["median"] / max(1, int(e.get("calls") or 1))
        if e.get("rerun"):  # a sweep point that missed, measured again
            e["native"] = dict(e["rerun"])
            e["median"] = e["native"].pop("portops")
        if e["native"]:
            e["best"] = min(e["native"].items(), key=lambda kv: kv[1])
            e["ratio"] = e["median"] / e["best"][1]
            e["miss"] = e["median"] > max(MISS_RATIO * e["best"][1], e["best"][1] + MISS_SECONDS)
        data["entries"].append(e)
    return data


def group_rows(entries: Sequence[dict]) -> list[tuple[dict, Any, Any, Any]]:
    """(entry, x copy, x limit, default speedup) per entry of one group, copies first."""
    copies = sorted((e for e in entries if e["kind"] == "copy"), key=lambda e: e["median"])
    default = next((e["median"] for e in entries if e["kind"] == "default"), None)
    rows = []
    for e in sorted(entries, key=lambda e: (KINDS.get(e["kind"], 4), e["median"])):
        t_copy, copy_bytes = e.get("paired_copy"), e["copy_bytes"]
        if (not t_copy or e["kind"] == "copy") and copies:
            t_copy, copy_bytes = copies[0]["median"], copies[0]["bytes"]
        x_copy = e["median"] / t_copy if t_copy else None
        x_limit = x_copy * copy_bytes / e["bytes"] if x_copy and copy_bytes and e["bytes"] else None
        speedup = e["median"] / default if default and KINDS.get(e["kind"], 4) > 1 else None
        rows.append((e, x_copy, x_limit, speedup))
    return rows


def split(entries: Sequence[dict]) -> tuple[dict[str, dict[str, list]], dict[str, list]]:
    """(op -> group -> entries, "<op> <backend> <device>" -> sweep points), in run order."""
    ops: dict[str, dict[str, list]] = {}
    sweeps: dict[str, list] = {}
    for e in entries:
        if e["native"]:
            sweeps.setdefault(f"{e['op']} {e['backend']} {e['device']}", []).append(e)
        else:
            ops.setdefault(e["op"], {}).setdefault(e["group"], []).append(e)
    return ops, sweeps


def sweep_summary(points: Sequence[dict]) -> str:
    """Points, misses, the worst ratio and the geometric-mean speedup over the best native."""
    ratios, misses = [e["ratio"] for e in points], sum(e["miss"] for e in points)
    geo = math.exp(-sum(map(math.log, ratios)) / len(ratios))
    return (
        f"{len(points)} points, {misses} miss{'es' * (misses != 1)}, worst ratio "
        f"{factor(max(ratios))}, geometric-mean speedup over the best native {factor(geo)}"
    )


def seconds(t: float | None) -> str:
    """A duration with a unit and three significant digits, e.g. ``12.3 ms``."""
    units = [("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)]
    unit, scale = next((u for u in units if t is not None and t >= u[1]), units[-1])
    return "—" if t is None else f"{digits(t / scale)} {unit}"


def factor(value: float | None) -> str:
    """A ratio such as ``1.23x``, ``12.3x`` or ``270x``; ``—`` when unknown."""
    return "—" if value is None else f"{digits(value)}x"


def digits(v: float) -> str:
    return f"{v:.2g}" if v < 0.1 else f"{v:.0f}" if v >= 100 else f"{v:.{1 + (v < 10)}f}"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown pipe table under a title, padded so that it reads well in a terminal."""
    widths = [max(map(len, col)) for col in zip(headers, *rows, strict=False)]
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    cells = [" | ".join(map(str.ljust, r, widths)) for r in [headers, *rows]]
    return "\n".join([title, "", f"| {cells[0]} |", rule, *(f"| {c} |" for c in cells[1:])])


def op_table(op: str, groups: dict[str, list[dict]]) -> str:
    """The table of one operation: a block of rows per group."""
    rows = []
    for members in groups.values():
        for i, (e, x_copy, x_limit, speedup) in enumerate(group_rows(members)):
            row = ["{case} {backend} {device}".format(**e) * (i == 0), e["name"], e["kind"]]
            paired = " paired" * bool(e.get("paired_copy") and e["kind"] != "copy")
            row += [seconds(e["median"]), factor(x_copy) + paired, factor(x_limit)]
            rows.append([*row, "(default)" if e["kind"] == "default" else factor(speedup)])
    headers = ["case", "name", "kind", "median", "x copy", "x limit", "default speedup"]
    return table(f"## {op}", headers, rows)


def sweep_table(key: str, points: Sequence[dict]) -> str:
    """The sweep of one "<op> <backend> <device>": a row per point."""
    baselines = sorted({k for e in points for k in e["baseline"]})
    rows = []
    for e in points:
        row = [e["case"], seconds(e["median"]), "{} {}".format(seconds(e["best"][1]), e["best"][0])]
        row.append(factor(e["ratio"]) + " MISS" * e["miss"])
        rows.append(row + [seconds(e["baseline"].get(b)) for b in baselines])
    headers = ["point", "portops", "best native", "ratio", *baselines]
    return table(f"## {key} sweep ({sweep_summary(points)})", headers, rows)


def report_text(run: dict[str, Any]) -> str:
    """The report: machine and versions, a table per operation, the sweep, the skips."""
    machine, status = run.get("machine_info") or {}, run.get("portops") or {}
    skipped = status.get("unavailable", [])
    cpu, versions = machine.get("cpu") or {}, machine.get("versions") or {}
    head = ["# portops benchmarks", "", f"results: {run['source']} {run.get('datetime', '')}"]
    if status.get("quick"):
        head.append("mode: quick (tiny sizes, 1-2 rounds: shows that they run, not timings)")
    head.append(f"CPU: {cpu.get('brand_raw', '?')} ({cpu.get('count', '?')} logical cores), GPU: ")
    head[-1] += machine.get("gpu") or "none detected"
    head.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    ops, sweeps = split(run["entries"])
    parts = ["\n".join(head), COLUMNS, *(op_table(op, g) for op, g in ops.items())]
    if sweeps:
        every = [e for points in sweeps.values() for e in points]
        parts += [f"{SWEEP_TEXT}\n\nEvery sweep together: {sweep_summary(every)}."]
        parts += [sweep_table(k, p) for k, p in sweeps.items()]
    skips = [f"  - {u['file']}: {u['reason']} ({u['count']} skipped)" for u in skipped]
    parts.append("\n".join(["Skipped:", *skips]) if skips else "No benchmark was skipped.")
    return "\n\n".join(parts) + "\n"


COLOURS = {"copy": "0.55", "default": "tab:blue", "native": "tab:green", "baseline": "tab:orange"}


def write_chart(run: dict[str, Any], path: str | Path) -> None:
    """The chart of :func:`draw_chart`, as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = draw_chart(run)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_chart(run: dict[str, Any]) -> Any:
    """A matplotlib figure: per operation, bars of each entry's "x copy" (its median where
    a group has no copy) coloured by kind; per op and library, a scatter of the sweep's
    portops / best native against the bytes each point moves, misses in red."""
    import matplotlib.pyplot as plt  # without a display, matplotlib draws with Agg
    from matplotlib.patches import Patch

    ops, sweeps = split(run["entries"])
    heights = [1 + 0.13 * sum(map(len, g.values())) for g in ops.values()] + [3.0] * len(sweeps)
    size = {"figsize": (10, sum(heights) + 1), "height_ratios": heights, "layout": "constrained"}
    fig, axes = plt.subplots(len(heights), 1, squeeze=False, **size)
    for ax, (op, groups) in zip(axes[:, 0], ops.items(), strict=False):
        rows = [r for g in groups.values() for r in group_rows(g)]
        by_copy = all(r[1] for r in rows)
        values = [r[1] if by_copy else r[0]["median"] * 1e3 for r in rows]
        ax.barh(range(len(rows)), values, color=[COLOURS.get(r[0]["kind"], "k") for r in rows])
        labels = ["{case} {backend} {device} · {name}".format(**r[0]) for r in rows]
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set(xscale="log", xlabel="time / copy of its bytes" if by_copy else "median [ms]")
        ax.axvline(1.0 if by_copy else 0, color="k", linewidth=0.8)
        ax.set_title(op, fontsize=9, loc="left")
    for ax, (key, pts) in zip(axes[len(ops) :, 0], sweeps.items(), strict=False):
        colours = ["tab:red" if e["miss"] else "tab:blue" for e in pts]
        ax.scatter([max(e["bytes"], 1) for e in pts], [e["ratio"] for e in pts], s=16, c=colours)
        ax.set(xscale="log", yscale="log", xlabel="bytes moved", ylabel="portops / best native")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.axhline(MISS_RATIO, color="tab:red", linewidth=0.6, linestyle="--")
        # Two lines: in one, the summary ran past the figure's right edge.
        title = f"{key} sweep (red: misses)\n{sweep_summary(pts)}"
        ax.set_title(title, fontsize=9, loc="left")
    # Below the panels: a legend at the top would overlap the title and the first panel.
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7)
    machine = run.get("machine_info") or {}
    gpu = f", GPU: {machine['gpu']}" if machine.get("gpu") else ""
    cpu = (machine.get("cpu") or {}).get("brand_raw", "?")
    fig.suptitle(f"portops benchmarks (CPU: {cpu}{gpu})", fontsize=10)
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; write the text file and the chart when asked; 1 without results."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__)
    parser.add_argument("results", help="pytest-benchmark JSON (--benchmark-json) of the run")
    parser.add_argument("--text", help="also write the report to this text file")
    parser.add_argument("--png", help="write the chart to this PNG file")
    args = parser.parse_args(argv)
    run = load(args.results)
    if not run["entries"]:
        print(f"no results in {args.results}: no benchmark ran", file=sys.stderr)
        return 1
    text = report_text(run)
    print(text, end="")
    for out in filter(None, (args.text, args.png)):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text, "utf-8") if out == args.text else write_chart(run, out)
        print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
