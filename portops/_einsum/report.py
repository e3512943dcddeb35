"""The report :func:`portops.einsum_path` returns: attributes, and a table as its ``str``."""

from __future__ import annotations

from dataclasses import dataclass

from .parse import spell
from .plan import Plan

__all__ = ["Chunking", "EinsumReport", "ReportStep", "describe"]


@dataclass(frozen=True, slots=True)
class ReportStep:
    """One step of the plan, with its equation spelled in letters."""

    kind: str  # batched matmul, multiply, multiply-and-sum, diagonal, sum, transpose
    equation: str  # e.g. "bnid,bnjd->bnij"
    operands: tuple[int, ...]
    batch: int
    m: int
    n: int
    k: int
    flops: int
    result: int  # elements of the result (0 when it is the einsum's output)
    copies: int  # elements copied to lay operands out for the GEMM


@dataclass(frozen=True, slots=True)
class Chunking:
    """One label cut into chunks to honour ``memory_limit``."""

    label: str
    size: int
    chunk: int
    summed: bool  # True: chunks are added; False: concatenated along the output


@dataclass(frozen=True, slots=True)
class EinsumReport:
    """What :func:`portops.einsum_path` found: ``str(report)`` gives the table.

    Attributes
    ----------
    equation : str
        The whole contraction, with its output spelled out.
    steps : tuple of ReportStep
        Each step in order: kind, equation, batch/M/N/K, FLOPs, result and copies.
    naive_flops, flops : int
        FLOPs of one loop over every label, and of the plan.
    largest_intermediate : int
        Elements of the largest array the plan makes (a result, copy or temporary).
    memory_limit : int or None
        The limit asked for.
    chunks : tuple of Chunking
        Labels cut into chunks to fit `memory_limit` (empty when none was needed).
    """

    equation: str
    steps: tuple[ReportStep, ...]
    naive_flops: int
    flops: int
    largest_intermediate: int
    memory_limit: int | None
    chunks: tuple[Chunking, ...]

    @property
    def speedup(self) -> float:
        """Naive FLOPs over the plan's FLOPs."""
        return self.naive_flops / max(self.flops, 1)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kind of every step, in order."""
        return tuple(s.kind for s in self.steps)

    def __str__(self) -> str:
        lines = [
            f"  Complete contraction:  {self.equation}",
            f"         Naive FLOP count:  {self.naive_flops:.4g}",
            f"     Optimized FLOP count:  {self.flops:.4g}",
            f"      Theoretical speedup:  {self.speedup:.4g}",
            f"  Largest intermediate:  {self.largest_intermediate:.4g} elements"
            + ("" if self.memory_limit is None else f" (memory_limit={self.memory_limit})"),
        ]
        for c in self.chunks:
            what = "summed, chunks added" if c.summed else "kept, chunks concatenated"
            lines.append(
                f"  Chunked over label {c.label!r}: size {c.size} in chunks of {c.chunk} ({what})"
            )
        header = (
            f"{'step':>4}  {'kind':<17} {'equation':<24} {'batch':>6} {'M':>6} {'N':>6} {'K':>6} "
            f"{'FLOPs':>10} {'result':>10} {'copied':>9}"
        )
        lines += ["-" * len(header), header, "-" * len(header)]
        for k, s in enumerate(self.steps):
            unary = s.kind in ("diagonal", "sum", "transpose")
            dims = " ".join(f"{'' if unary else d:>6}" for d in (s.batch, s.m, s.n, s.k))
            result: object = "view" if s.kind == "transpose" else s.result
            if s.result == 0 and not unary:
                result = "output"
            lines.append(
                f"{k:>4}  {s.kind:<17} {s.equation:<24} {dims} {s.flops:>10.4g} {result!s:>10} "
                f"{s.copies:>9}"
            )
        if not self.steps:
            lines.append("     (no arithmetic: a transpose or view of the operand)")
        return "\n".join(lines)


def describe(
    plan: Plan, equation: str, names: dict[int, str], memory_limit: int | None
) -> EinsumReport:
    """The report of `plan` (its labels spelled with `names`)."""
    steps = tuple(
        ReportStep(
            s.kind,
            spell(s.terms[:-1], s.terms[-1], names),
            *(s.operands, s.batch, s.m, s.n, s.k, s.flops, s.result, s.copies),
        )
        for s in plan.steps
    )
    chunks = tuple(
        Chunking(names[c.label], c.size, c.chunk, c.output_axis is None) for c in plan.slices
    )
    return EinsumReport(
        equation, steps, plan.naive_flops, plan.flops, plan.peak, memory_limit, chunks
    )
