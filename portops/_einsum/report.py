"""The readable report of :func:`portops.einsum_path`."""

from __future__ import annotations

from .plan import Plan

__all__ = ["describe"]


def describe(plan: Plan, equation: str, names: dict[int, str], memory_limit: int | None) -> str:
    """A table of the plan's steps: kind, batch/M/N/K, FLOPs, sizes and copies."""
    speedup = plan.naive_flops / max(plan.flops, 1)
    lines = [
        f"  Complete contraction:  {equation}",
        f"         Naive FLOP count:  {plan.naive_flops:.4g}",
        f"     Optimized FLOP count:  {plan.flops:.4g}",
        f"      Theoretical speedup:  {speedup:.4g}",
        f"  Largest intermediate:  {plan.peak:.4g} elements"
        + ("" if memory_limit is None else f" (memory_limit={memory_limit})"),
    ]
    for sl in plan.slices:
        what = "kept, chunks concatenated" if sl.output_axis is not None else "summed, chunks added"
        lines.append(
            f"  Chunked over label {names[sl.label]!r}: size {sl.size} in chunks of {sl.chunk} "
            f"({what})"
        )
    header = (
        f"{'step':>4}  {'kind':<17} {'equation':<24} {'batch':>6} {'M':>6} {'N':>6} {'K':>6} "
        f"{'FLOPs':>10} {'result':>10} {'copied':>9}"
    )
    lines += ["-" * len(header), header, "-" * len(header)]

    def spell(terms: tuple[tuple[int, ...], ...]) -> str:
        lhs = ",".join("".join(names[x] for x in t) for t in terms[:-1])
        return f"{lhs}->{''.join(names[x] for x in terms[-1])}"

    for k, s in enumerate(plan.steps):
        if s.kind in ("diagonal", "sum", "transpose"):
            dims = f"{'':>6} {'':>6} {'':>6} {'':>6}"
        else:
            dims = f"{s.batch:>6} {s.m:>6} {s.n:>6} {s.k:>6}"
        result: object = s.result
        if s.kind == "transpose":
            result = "view"
        elif s.result == 0 and s.kind not in ("diagonal", "sum"):
            result = "output"
        lines.append(
            f"{k:>4}  {s.kind:<17} {spell(s.terms):<24} {dims} {s.flops:>10.4g} {result!s:>10} "
            f"{s.copies:>9}"
        )
    if not plan.steps:
        lines.append("     (no arithmetic: a transpose or view of the operand)")
    return "\n".join(lines)
