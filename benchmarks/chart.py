"""The chart of a benchmark run: portops' speedup over each method, a panel per operation.

One figure, legible at a documentation page's width (about 800 px): each headline
comparison is a block of horizontal bars, one per seed method and one for the best native
call, of portops' speedup over it (the median of per-round ratios) on a log axis centred
on 1, with its 95% interval; a grey bar behind it reaches the speedup portops would have
at the hardware limit. A sweep, where the run has one (more than the default run's
sample), adds a panel of every point's speedup over the best native call. The title names
the machine and the load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import (
    MISS_RATIOS,
    Comparison,
    digits,
    load_line,
    machine_line,
    sweep_groups,
    sweep_stats,
)

WIDTH_IN = 8.0  # shown 800 px wide (8.33 in at 96 px per inch), its fonts grow 4%
DPI = 120  # 960 px wide; 1600 px tall leaves 13.3 in for the panels
MAX_HEIGHT_IN = 1600 / DPI
ROW_IN = 0.2  # a bar or a comparison's heading
LEGEND_IN = 0.3
SWEEP_PANEL_POINTS = 10  # a sweep panel where a sweep has this many points
FONT = 10  # labels; values and the legend 1 pt smaller
COLOURS = {"baseline": "#e08a2c", "native": "#3a78b5"}
LIMIT_COLOUR = "#d9d9d9"
LABELS = {"baseline": "seed method", "native": "best native call"}
FAMILIES = {  # panel of an operation
    "shift_sum": "shift_sum family (CASSI dispersion)",
    "shift_sum_adjoint": "shift_sum family (CASSI dispersion)",
    "shift_sum_pinv": "shift_sum family (CASSI dispersion)",
    "shear": "shear / unshear",
    "unshear": "shear / unshear",
}


def panels(comparisons: Sequence[Comparison]) -> dict[str, list[Comparison]]:
    """Panel title -> its comparisons: the headline ones (all but the sweep without any),
    the CASSI operations first, then the others in alphabetical order."""
    shown = [c for c in comparisons if c.headline] or [c for c in comparisons if not c.sweep]
    out: dict[str, list[Comparison]] = {}
    for c in shown:
        if c.compared():
            out.setdefault(FAMILIES.get(c.op, c.op), []).append(c)
    order = list(dict.fromkeys(FAMILIES.values()))
    return dict(sorted(out.items(), key=lambda kv: (kv[0] not in order, kv[0])))


def heading(c: Comparison, panel: list[Comparison]) -> str:
    """A comparison's name in its panel: its label, with the library where they differ."""
    return f"{c.label} · {c.where}" if len({x.where for x in panel}) > 1 else c.label


def write_chart(run: dict[str, Any], path: str | Path) -> None:
    """The chart of :func:`draw_chart`, as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = draw_chart(run)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def draw_chart(run: dict[str, Any]) -> Any:
    """The figure (see the module docstring); its size keeps to MAX_HEIGHT_IN."""
    import matplotlib.pyplot as plt  # without a display, matplotlib draws with Agg

    groups = panels(run["comparisons"])
    sweeps = sweep_groups(run["comparisons"])
    if max(map(len, sweeps.values()), default=0) < SWEEP_PANEL_POINTS:
        sweeps = {}  # the default run's sample: in the report, too few for a panel
    rows = [sum(1 + len(c.compared()) for c in cs) for cs in groups.values()]
    heights = [LEGEND_IN] + [r * ROW_IN + 0.5 for r in rows]
    heights += [len(sweeps) * 0.3 + 0.6] if sweeps else []
    height = min(MAX_HEIGHT_IN, sum(heights) + 0.6)
    with plt.rc_context({"font.size": FONT, "axes.titlesize": FONT + 1}):
        fig, axes = plt.subplots(
            len(heights),
            1,
            squeeze=False,
            figsize=(WIDTH_IN, height),
            height_ratios=heights,
            layout="constrained",
        )
        for ax, (title, comparisons) in zip(axes[1:, 0], groups.items(), strict=False):
            _speedups(ax, title, comparisons)
        if sweeps:
            _sweep(axes[-1, 0], sweeps)
        _legend(axes[0, 0], has_limit=any(c.limit_s for cs in groups.values() for c in cs))
        if not groups and not sweeps:
            axes[0, 0].text(0.5, 0.5, "no comparison in this run", ha="center")
        date = (run.get("datetime") or "")[:16].replace("T", " ")
        fig.suptitle(
            "portops' speedup over each method (its time / portops'; > 1: portops faster)\n"
            f"{machine_line(run)}\n{load_line(run)}; {date}",
            fontsize=FONT + 1,
        )
    return fig


def _symmetric_limits(ax: Any, values: Sequence[float]) -> None:
    """A log axis centred on 1, wide enough for every value and a label beside it."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    extent = max([2.0, *(max(v, 1 / v) for v in finite)]) * 1.8
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_xlim(1 / extent, extent)
    # A label every few centimetres: 1-2-5 steps, 1-3 steps, or the powers of ten.
    mantissas = (1, 2, 5) if extent <= 20 else (1, 3) if extent <= 200 else (1,)
    steps = [m * 10.0**e for e in range(-4, 5) for m in mantissas]
    ax.xaxis.set_major_locator(FixedLocator([v for v in steps if 1 / extent <= v <= extent]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="k", linewidth=0.9)


def _speedups(ax: Any, title: str, comparisons: list[Comparison]) -> None:
    y, ticks, labels, bold = 0, [], [], []
    values: list[float] = []
    for c in comparisons:
        ticks.append(y)
        labels.append(heading(c, comparisons))
        bold.append(True)
        y += 1
        for name in c.compared():
            r = c.speedup(name)
            kind = c.kinds[name]
            end = r.high if r.median >= 1 else r.low  # where the label goes
            if c.limit_s and not c.copy_disturbed:  # behind the bar: portops at the limit
                at_limit = c.median(name) / c.limit_s
                ax.barh(y, at_limit - 1, left=1, height=0.8, color=LIMIT_COLOUR, zorder=1)
                values.append(at_limit)
                end = max(end, at_limit) if at_limit >= 1 and r.median >= 1 else end
            ax.barh(
                y,
                r.median - 1,
                left=1,
                height=0.55,
                color=COLOURS[kind],
                hatch="///" if r.noisy else None,
                edgecolor="white" if r.noisy else None,
                xerr=[[r.median - r.low], [r.high - r.median]],
                error_kw={"elinewidth": 0.8, "capsize": 2},
                zorder=2,
            )
            ax.text(
                end * (1.06 if r.median >= 1 else 1 / 1.06),
                y,
                f"{digits(r.median)}x" + " noisy" * r.noisy,
                va="center",
                ha="left" if r.median >= 1 else "right",
                fontsize=FONT - 1,
            )
            values += [r.low, r.high]
            ticks.append(y)
            labels.append(name)
            bold.append(False)
            y += 1
        ax.axhline(y - 0.5, color="0.85", linewidth=0.6)
    ax.set_yticks(ticks, labels)
    for tick, is_bold in zip(ax.get_yticklabels(), bold, strict=True):
        tick.set_fontweight("bold" if is_bold else "normal")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(y - 0.5, -0.6)
    _symmetric_limits(ax, values)
    ax.set_title(title, loc="left", fontweight="bold")
    ax.grid(axis="x", which="major", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)


def _sweep(ax: Any, sweeps: dict[str, list[Comparison]]) -> None:
    """Every sweep point's speedup over the best native, a row per operation and library;
    the geometric mean as a diamond, misses (at the lower threshold) in red."""
    values: list[float] = []
    labels: list[str] = []
    low = min(MISS_RATIOS)
    for i, (key, points) in enumerate(sweeps.items()):
        speedups = [1 / (c.ratio_to_best() or math.nan) for c in points]
        colours = ["tab:red" if c.misses(low) else "0.35" for c in points]
        jitter = [((j * 0.618) % 1 - 0.5) * 0.4 for j in range(len(points))]
        ax.scatter(speedups, [i + d for d in jitter], s=9, c=colours, alpha=0.7, linewidths=0)
        s = sweep_stats(points)
        ax.plot([s["speedup"]], [i], marker="D", color="k", markersize=5)
        misses = s["misses"][low]
        labels.append(f"{key}: {digits(s['speedup'])}x, {misses} miss{'es' * (misses != 1)}")
        values += speedups
    ax.set_yticks(range(len(sweeps)), labels)
    ax.set_ylim(len(sweeps) - 0.5, -0.5)
    _symmetric_limits(ax, values)
    ax.axvline(1 / low, color="tab:red", linewidth=0.7, linestyle="--")
    ax.set_title(
        f"sweep: speedup over the best native call at each point\n"
        f"(◆ the geometric mean; red: a miss at {low}x)",
        loc="left",
        fontweight="bold",
    )


def _legend(ax: Any, *, has_limit: bool) -> None:
    """The legend, in a row of its own above the panels."""
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=c, label=LABELS[k]) for k, c in COLOURS.items()]
    handles.append(Patch(facecolor="0.6", hatch="///", edgecolor="white", label="noisy"))
    if has_limit:
        handles.append(Patch(color=LIMIT_COLOUR, label="portops at the limit"))
    ax.set_axis_off()
    ax.legend(handles=handles, loc="center", ncols=len(handles), fontsize=FONT - 1,
              frameon=False, columnspacing=1.2, handlelength=1.6)  # fmt: skip
