"""The report of a benchmark run, from pytest-benchmark's JSON (``--benchmark-json``).

Usage::

    python -m benchmarks.report bench.json [--text bench.txt] [--png bench.png]
    python -m benchmarks.report bench.json --readme-table   # the README's headline table
    python -m benchmarks.report bench.json --compare earlier.json  # do two runs agree?

Each comparison (``compare`` in ``benchmarks/conftest.py``) stores every candidate's
seconds per call, a value per interleaved round; everything here is computed from them:
portops' speedup over each method (the median of per-round ratios, its 95% interval,
the round count), the hardware limit from the best copy of the run, the sweep's misses.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.ratios import TOLERANCE, Ratio, geometric_mean, median, per_round

# A sweep point misses at r when portops takes over r times the best native call and
# over MISS_SECONDS longer (per-call overhead on tiny inputs, the timer's noise).
MISS_RATIOS = (1.25, 1.1)
MISS_SECONDS = 3e-6
# The order of operations in the tables: the CASSI family first, as in the chart.
OP_ORDER = {"shift_sum": 0, "shift_sum_adjoint": 0, "shift_sum_pinv": 0, "shear": 1}
OP_ORDER |= {"unshear": 1, "einsum": 2, "vecdot": 3}
KIND_NAMES = {"default": "portops", "native": "native", "baseline": "baseline", "copy": "copy"}

METHOD = f"""\
How to read it. Each comparison runs portops and the other methods in interleaved rounds:
within a round every method takes a turn, in an order shuffled from round to round, so
that all see the machine alike. A turn is one untimed call, then three batches of calls
(at least 1 ms each) of which the fastest counts; a call over 0.1 s is timed once.
"speedup" is a method's time over portops' in the same round (above 1: portops is
faster): the median over the rounds, with its 95% interval (sign-test interval of the
median; the extremes below 6 rounds). Rounds are added until the intervals of the seed
methods and the best native call are within ±{TOLERANCE:.0%} of their medians or the
comparison's share of the time budget is spent; "noisy" marks an interval that stayed
wider. Kinds: "seed" is a method of the source the operation came from (as written, in
its fairest form), "native" another call of the same library ("best": the fastest),
"baseline" a peer's code or another implementation. "x limit": portops' time over the
time its bytes (read + written) take at the copy bandwidth, (bytes read + written) / time
of the best copy of the run at that size. Below 1 the row says "below the copy" instead:
the copy was disturbed, or the data sat in a cache where reading costs less than copying."""


@dataclass
class Comparison:
    """One comparison of the run: its candidates' per-call times, a value per round."""

    op: str
    case: str
    label: str
    backend: str
    device: str
    times: dict[str, list[float | None]]  # None: a round the candidate sat out
    kinds: dict[str, str]
    portops: str = "portops"
    headline: bool = False
    sweep: bool = False
    nbytes: int = 0
    copy_nbytes: dict[str, int] = field(default_factory=dict)
    load: Any = None
    limit_s: float | None = None  # set by `load` from the run's best copy
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.times[self.portops])

    @property
    def where(self) -> str:
        """``"torch CPU"``, ``"cupy"``: the library and device."""
        return self.backend if self.backend == "cupy" else f"{self.backend} {self.device.upper()}"

    @property
    def name(self) -> str:
        """``shift_sum forward, mask``, ``shift_sum_pinv, mask``: the op and its label, the
        label's first part left out where the op's name says it."""
        head, _, rest = self.label.partition(", ")
        name = self.op if head in self.op else f"{self.op} {head}"
        return name + (f", {rest}" if rest else "")

    @property
    def title(self) -> str:
        return f"{self.name} · {self.where}"

    def median(self, name: str) -> float:
        return median(self.times[name])

    def speedup(self, name: str) -> Ratio:
        """`name`'s time over portops' in each round: above 1, portops is faster."""
        return per_round(self.times[name], self.times[self.portops])

    def named(self, *kinds: str) -> list[str]:
        return [n for n, k in self.kinds.items() if k in kinds]

    def best_native(self) -> str | None:
        natives = self.named("native")
        return min(natives, key=self.median) if natives else None

    def copy_median(self) -> float | None:
        """The median time of the comparison's copy of its bytes, if it has one."""
        copies = self.named("copy")
        return self.median(copies[0]) if copies else None

    def compared(self) -> list[str]:
        """What the headline shows: every seed method, then the best native call."""
        best = self.best_native()
        return self.named("baseline") + ([best] if best else [])

    @property
    def x_limit(self) -> float | None:
        return self.median(self.portops) / self.limit_s if self.limit_s else None

    @property
    def copy_disturbed(self) -> bool:
        return self.x_limit is not None and self.x_limit < 1

    def ratio_to_best(self) -> float | None:
        """Portops' time over the best native's, the median of per-round ratios."""
        best = self.best_native()
        return 1 / self.speedup(best).median if best else None

    def misses(self, ratio: float) -> bool:
        best = self.best_native()
        if best is None:
            return False
        slower = self.median(self.portops) > self.median(best) + MISS_SECONDS
        return (self.ratio_to_best() or 0) > ratio and slower


def load(path: str | Path) -> dict[str, Any]:
    """pytest-benchmark's JSON with ``comparisons`` (a ``Comparison`` per comparison, the
    limit set from the run's best copy) and ``singles`` (benchmarks of one candidate
    timed on their own, ``bench`` in the conftest: their ``extra_info`` with ``group``,
    ``median`` per call and ``rounds``)."""
    p = Path(path)
    data: dict[str, Any] = json.loads(p.read_text("utf-8") or "{}") if p.is_file() else {}
    data["comparisons"], data["singles"], data["source"] = [], [], str(p)
    for b in data.get("benchmarks", []):
        info = dict(b.get("extra_info") or {})
        if "candidates" not in info:
            calls = max(1, int(info.get("calls") or 1))
            stats = b.get("stats") or {}
            single = {"op": "?", "case": "?", "backend": "?", "device": "?", "kind": "?"}
            single |= {"name": b["name"], "bytes": 0} | info
            single |= {"group": b.get("group") or b["name"], "rounds": stats.get("rounds", 0)}
            single["median"] = stats.get("median", math.nan) / calls
            data["singles"].append(single)
            continue
        candidates = info.pop("candidates")
        data["comparisons"].append(
            Comparison(
                op=info.pop("op"),
                case=info.pop("case"),
                label=info.pop("label", ""),
                backend=info.pop("backend"),
                device=info.pop("device"),
                times={n: list(c["times"]) for n, c in candidates.items()},
                kinds={n: c["kind"] for n, c in candidates.items()},
                portops=info.pop("portops", "portops"),
                headline=bool(info.pop("headline", False)),
                sweep=bool(info.pop("sweep", False)),
                nbytes=int(info.pop("nbytes", 0) or 0),
                copy_nbytes={n: c.get("nbytes", 0) for n, c in candidates.items()},
                load=info.pop("load", None),
                info=info,
            )
        )
    set_limits(data["comparisons"])
    return data


def headline(comparisons: Iterable[Comparison]) -> list[Comparison]:
    """The headline comparisons, the CASSI family first (``OP_ORDER``), else in run order."""
    return sorted((c for c in comparisons if c.headline), key=lambda c: OP_ORDER.get(c.op, 9))


def set_limits(comparisons: Sequence[Comparison]) -> None:
    """Each comparison's limit: its bytes at the best copy bandwidth of the run among the
    copies of the same size on the same device (a copy is only ever slowed down)."""
    best: dict[tuple[str, int], float] = {}  # (device, bytes copied) -> bytes per second
    for c in comparisons:
        for name in c.named("copy"):
            key, times = (c.device, c.copy_nbytes[name]), [t for t in c.times[name] if t]
            if key[1] and times:
                best[key] = max(best.get(key, 0.0), key[1] / min(times))
    for c in comparisons:
        bandwidths = [best.get((c.device, c.copy_nbytes[n]), 0.0) for n in c.named("copy")]
        if c.nbytes and max(bandwidths, default=0.0) > 0:
            c.limit_s = c.nbytes / max(bandwidths)


# ------------------------------------------------------------------ formatting


def seconds(t: float | None) -> str:
    """A duration with a unit and three significant digits, e.g. ``12.3 ms``."""
    units = [("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)]
    if t is None or not math.isfinite(t):
        return "—"
    unit, scale = next((u for u in units if t >= u[1]), units[-1])
    return f"{digits(t / scale)} {unit}"


def factor(value: float | None) -> str:
    """A ratio such as ``1.23x``, ``12.3x`` or ``270x``; ``—`` when unknown."""
    return "—" if value is None or not math.isfinite(value) else f"{digits(value)}x"


def digits(v: float) -> str:
    return f"{v:.2g}" if v < 0.1 else f"{v:.0f}" if v >= 100 else f"{v:.{1 + (v < 10)}f}"


def speedup_text(r: Ratio, *, interval: bool = True) -> str:
    """``1.32x [1.25, 1.40]``, or ``1.32x ±6%``; ``noisy`` when the interval is wide."""
    if interval:
        text = f"{factor(r.median)} [{digits(r.low)}, {digits(r.high)}]"
    else:
        text = (
            f"{factor(r.median)} ±{r.spread:.0%}" if math.isfinite(r.spread) else factor(r.median)
        )
    return text + " noisy" * r.noisy


def limit_text(c: Comparison) -> str:
    if c.x_limit is None:
        return "—"
    return "below the copy" if c.copy_disturbed else factor(c.x_limit)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    """A Markdown pipe table, padded so that it reads well in a terminal."""
    widths = [max(map(len, col)) for col in zip(headers, *rows, strict=False)]
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    cells = [" | ".join(map(str.ljust, r, widths)) for r in [headers, *rows]]
    lines = [f"| {cells[0]} |", rule, *(f"| {c} |" for c in cells[1:])]
    return "\n".join(([title, ""] if title else []) + lines)


def comparison_rows(c: Comparison) -> list[list[str]]:
    """portops, each compared method, the copy: a row each."""
    visits = len(c.info.get("visits") or [0])
    rounds = str(c.rounds) + " (few)" * (c.headline and c.rounds < 5)
    rounds += f" in {visits} visits" * (visits > 1)
    rows = [
        [c.title, "portops", "portops", seconds(c.median(c.portops)), "", rounds, limit_text(c)]
    ]
    for name in c.named("baseline", "native"):
        kind = "seed" if c.headline and c.kinds[name] == "baseline" else KIND_NAMES[c.kinds[name]]
        kind += " (best)" * (name == c.best_native())
        r = c.speedup(name)
        rows.append(["", name, kind, seconds(c.median(name)), speedup_text(r), str(r.rounds), ""])
    for name in c.named("copy"):
        limit = f"limit {seconds(c.limit_s)}" if c.limit_s else ""
        copied = f"copy of {c.copy_nbytes[name] / 2e6:.3g} MB"
        timed = str(sum(t is not None for t in c.times[name]))
        rows.append(["", copied, "copy", seconds(c.median(name)), "", timed, limit])
    return rows


HEADERS = ["comparison", "method", "kind", "time per call", "portops' speedup (95%)", "rounds"]
HEADERS.append("x limit")


def comparisons_table(comparisons: Iterable[Comparison], title: str) -> str:
    rows = [row for c in comparisons for row in comparison_rows(c)]
    return table(HEADERS, rows, title)


def sweep_groups(comparisons: Sequence[Comparison]) -> dict[str, list[Comparison]]:
    """``"<op> <library device>"`` -> its sweep points, in run order."""
    groups: dict[str, list[Comparison]] = {}
    for c in comparisons:
        if c.sweep and c.best_native():
            groups.setdefault(f"{c.op} {c.where}", []).append(c)
    return groups


def sweep_stats(points: Sequence[Comparison]) -> dict[str, Any]:
    """Points, misses at each threshold, the worst ratio, the geometric-mean speedup."""
    ratios = [c.ratio_to_best() or math.nan for c in points]
    return {
        "points": len(points),
        "misses": {r: sum(c.misses(r) for c in points) for r in MISS_RATIOS},
        "worst": max(ratios, default=math.nan),
        "speedup": geometric_mean([1 / r for r in ratios]),
        "noisy": sum(c.speedup(c.best_native() or "").noisy for c in points),
    }


def sweep_summary(points: Sequence[Comparison]) -> str:
    s = sweep_stats(points)
    misses = ", ".join(f"{n} at {r}x" for r, n in s["misses"].items())
    return (
        f"{s['points']} points, misses {misses}, worst ratio {factor(s['worst'])}, "
        f"geometric-mean speedup over the best native {factor(s['speedup'])}"
    )


SWEEP_TEXT = f"""\
Sweep: at each point portops and every native call of the same library run in interleaved
rounds; "ratio" is portops' time over the best native's (the native with the lowest median),
the median of per-round ratios (below 1: portops is faster). A point misses at r when the
ratio is over r and portops takes over {MISS_SECONDS * 1e6:g} µs longer; misses are counted
at {" and ".join(f"{r}x" for r in MISS_RATIOS)}. A point that misses at {min(MISS_RATIOS)}x
is measured again in twice its rounds before it counts."""


def sweep_section(groups: dict[str, list[Comparison]]) -> str:
    headers = ["op, library", "points", *(f"misses at {r}x" for r in MISS_RATIOS)]
    headers += ["worst ratio", "geometric-mean speedup over the best native", "noisy"]
    every = [c for points in groups.values() for c in points]
    rows = []
    for key, points in [*groups.items(), ("every sweep", every)]:
        s = sweep_stats(points)
        rows.append([key, str(s["points"]), *(str(n) for n in s["misses"].values())])
        rows[-1] += [factor(s["worst"]), factor(s["speedup"]), str(s["noisy"])]
    parts = [SWEEP_TEXT, table(headers, rows, "## Sweep summary")]
    for key, points in groups.items():
        rows = []
        for c in points:
            best = c.best_native() or ""
            missed = [r for r in MISS_RATIOS if c.misses(r)]
            miss = f" MISS at {max(missed)}x" if missed else ""
            noisy = " noisy" * c.speedup(best).noisy
            rows.append([c.case, seconds(c.median(c.portops)), f"{seconds(c.median(best))} {best}"])
            rows[-1] += [factor(c.ratio_to_best()) + miss + noisy, str(c.rounds)]
        title = f"## {key} sweep ({sweep_summary(points)})"
        parts.append(table(["point", "portops", "best native", "ratio", "rounds"], rows, title))
    return "\n\n".join(parts)


def singles_section(singles: Sequence[dict[str, Any]]) -> str:
    """Benchmarks timed one candidate at a time (no comparison), by group."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in singles:
        groups.setdefault(s["group"], []).append(s)
    rows = []
    for group, members in groups.items():
        default = next((m["median"] for m in members if m["kind"] == "default"), None)
        for i, m in enumerate(members):
            ratio = m["median"] / default if default and m["kind"] != "default" else None
            rows.append([group * (i == 0), m["name"], m["kind"], seconds(m["median"])])
            rows[-1] += [str(m["rounds"]), factor(ratio)]
    headers = ["group", "name", "kind", "median per call", "rounds", "time / portops'"]
    title = "## Timed one at a time (not interleaved: ratios across separate rounds)"
    return table(headers, rows, title)


def machine_line(run: dict[str, Any]) -> str:
    """``Intel Xeon (2 cores), no GPU``: the CPU model, its cores, the GPU."""
    machine = run.get("machine_info") or {}
    cpu = machine.get("cpu") or {}
    cores = cpu.get("count", "?")
    usable = machine.get("cpus_usable")
    cores_text = f"{cores} cores" + (f", {usable} usable" if usable and usable != cores else "")
    gpu = machine.get("gpu")
    return f"{cpu.get('brand_raw', '?')} ({cores_text}), " + (f"GPU {gpu}" if gpu else "no GPU")


def load_line(run: dict[str, Any], *, threads: bool = True) -> str:
    """``load 1.20 → 2.35, 1 thread`` (the 1-minute load average before and after the run;
    the threads the libraries ran, where the run chose fewer than its cores)."""
    status = run.get("portops") or {}
    before, after = status.get("load_before"), status.get("load_after")
    text = f"load {before[0]:.2f} → {after[0]:.2f}" if before and after else "load unknown"
    n, usable = status.get("threads"), status.get("cores_usable")
    if threads and n and usable and n < usable:
        text += f", {n} thread{'s' * (n > 1)} (other work busy on the rest)"
    return text


def report_text(run: dict[str, Any]) -> str:
    """The report: machine, load, the headline comparisons, the others, the sweep."""
    machine, status = run.get("machine_info") or {}, run.get("portops") or {}
    versions = machine.get("versions") or {}
    head = ["# portops benchmarks", "", f"results: {run['source']} {run.get('datetime', '')}"]
    head.append(f"machine: {machine_line(run)}")
    head.append(f"{load_line(run, threads=False)} (1-minute load average before and after)")
    if status.get("threads"):
        busy = status.get("busy_cores_at_start")
        head.append(f"threads: {status['threads']} for torch, the BLAS, portops and Dask")
        head[-1] += f" ({busy} cores busy with other work at the start)" * (busy is not None)
    modes = [m for m in ("quick", "full", "sweep") if status.get(m)]
    length = f", {status['seconds']:.0f} s" if status.get("seconds") else ""
    head.append(f"mode: {', '.join(modes) or 'default'}{length}")
    if status.get("quick"):
        head.append("(quick: tiny sizes, 2 rounds: it shows that they run, not timings)")
    head.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    comparisons = run["comparisons"]
    parts = ["\n".join(head), METHOD]
    if headline(comparisons):
        parts.append(comparisons_table(headline(comparisons), "## Headline comparisons"))
    others = [c for c in comparisons if not c.headline and not c.sweep]
    if others:
        parts.append(comparisons_table(others, "## Other comparisons"))
    groups = sweep_groups(comparisons)
    if groups:
        parts.append(sweep_section(groups))
    if run["singles"]:
        parts.append(singles_section(run["singles"]))
    skipped = status.get("unavailable", [])
    skips = [f"  - {u['file']}: {u['reason']} ({u['count']} skipped)" for u in skipped]
    parts.append("\n".join(["Skipped:", *skips]) if skips else "No benchmark was skipped.")
    return "\n\n".join(parts) + "\n"


def headline_rows(run: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(headers, a row per headline comparison): portops' time, its speedup over each seed
    method and over the best native call (median ±spread), the limit, the rounds."""
    rows = []
    for c in headline(run["comparisons"]):
        seeds = [f"{speedup_text(c.speedup(n), interval=False)} {n}" for n in c.named("baseline")]
        best = c.best_native()
        native = f"{speedup_text(c.speedup(best), interval=False)} {best}" if best else "—"
        rows.append([f"{c.name}, {c.where}", seconds(c.median(c.portops))])
        fewest = min((c.speedup(n).rounds for n in c.compared()), default=c.rounds)
        rows[-1] += [", ".join(seeds) or "—", native, limit_text(c), str(fewest)]
    headers = ["case", "portops", "speedup over the seed's methods", "over the best native call"]
    return [*headers, "x limit", "rounds"], rows


def readme_table(run: dict[str, Any]) -> str:
    """The README's headline table (Markdown), the machine and the load named below it."""
    headers, rows = headline_rows(run)
    when = (run.get("datetime") or "")[:10]
    caption = f"{machine_line(run)}; {load_line(run)}; `nox -s bench`, {when}."
    return table(headers, rows) + "\n\n" + caption + "\n"


AGREEMENT = 0.15  # two runs agree on a ratio when they differ by at most this much
MACHINE_MOVED = 0.25  # a comparison's copy this much slower or faster: the machine changed


def compare_runs(run: dict[str, Any], earlier: dict[str, Any]) -> tuple[str, int, int]:
    """Each headline ratio of `earlier` and `run` side by side, with their difference:
    (the table, how many ratios differ by over ``AGREEMENT`` without being noisy in both,
    and how many of those where the comparison's copy moved by over ``MACHINE_MOVED``: a
    busy machine's memory bandwidth changed between the runs, and with it the ratio of
    methods that it bounds differently)."""
    previous = {c.title: c for c in headline(earlier["comparisons"])}
    rows, disagree, moved = [], 0, 0
    for c in headline(run["comparisons"]):
        prior = previous.get(c.title)
        copies = (c.copy_median(), prior and prior.copy_median())
        for n in c.compared():
            new = c.speedup(n)
            if prior is None or n not in prior.times:
                rows.append([c.title, n, "—", speedup_text(new), "not in the earlier run"])
                continue
            old = prior.speedup(n)
            diff = max(new.median / old.median, old.median / new.median) - 1
            noisy = old.noisy and new.noisy
            verdict = "agree" if diff <= AGREEMENT else "noisy in both" if noisy else "DISAGREE"
            if verdict == "DISAGREE" and copies[0] and copies[1]:
                change = copies[0] / copies[1]
                if max(change, 1 / change) - 1 > MACHINE_MOVED:
                    verdict += f" (its copy {change:.2f}x the time)"
                    moved += 1
            disagree += verdict.startswith("DISAGREE")
            rows.append([c.title, n, speedup_text(old), speedup_text(new), f"{diff:.0%} {verdict}"])
    headers = ["comparison", "method", "earlier speedup", "this run's", "difference"]
    return table(headers, rows), disagree, moved


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report (or the README table); write the text and the chart when asked."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__)
    parser.add_argument("results", help="pytest-benchmark JSON (--benchmark-json) of the run")
    parser.add_argument("--text", help="also write the report to this text file")
    parser.add_argument("--png", help="write the chart to this PNG file")
    parser.add_argument("--readme-table", action="store_true", help="print the README's table")
    parser.add_argument(
        "--compare", metavar="EARLIER", help="compare the headline ratios with an earlier run's"
    )
    args = parser.parse_args(argv)
    run = load(args.results)
    if not run["comparisons"] and not run["singles"]:
        print(f"no results in {args.results}: no benchmark ran", file=sys.stderr)
        return 1
    if args.compare:
        text, disagree, moved = compare_runs(run, load(args.compare))
        print(text)
        print(f"{disagree} headline ratios differ by over {AGREEMENT:.0%} (noisy in both excepted)")
        if moved:
            print(
                f"{moved} of them where the comparison's copy of its bytes took over "
                f"{MACHINE_MOVED:.0%} more or less time than in the earlier run: the machine's "
                "memory bandwidth changed between the runs"
            )
        return 1 if disagree else 0
    if args.readme_table:
        print(readme_table(run), end="")
        return 0
    text = report_text(run)
    print(text, end="")
    if args.text:
        Path(args.text).parent.mkdir(parents=True, exist_ok=True)
        Path(args.text).write_text(text, "utf-8")
        print(f"written: {args.text}")
    if args.png:
        from benchmarks.chart import write_chart

        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        write_chart(run, args.png)
        print(f"written: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
