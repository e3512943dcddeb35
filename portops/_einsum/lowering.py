"""What one call signature plans to: cheap facts at once (enough to pick
``numpy.einsum`` for small contractions), the lowered plan on demand.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._tracing import memo
from .._validate import check_fits
from .parse import Equation
from .path import candidates
from .plan import Plan, SliceSpec, build, sizes_of

__all__ = ["Lowering"]


@dataclasses.dataclass(eq=False)
class Lowering:
    """One signature's cheap facts, and its plan built on first use (two threads may
    both build it: the same plan, one of them kept)."""

    equation: Equation
    shapes: tuple[tuple[int, ...], ...]
    orders: tuple[tuple[int, ...], ...]
    boolean: bool
    optimize: Any
    memory_limit: int | None
    names: dict[int, str]
    merge: bool  # see plan.build
    itemsize: int = 0  # of the result; 0: no memory check (lazy arrays)

    def __post_init__(self) -> None:
        self.sizes = sizes_of(self.equation, self.shapes)  # raises for mismatched label sizes
        self.n_operands = len(self.shapes)
        # Every label's size, once per operand (what numpy.einsum's loop multiplies).
        self.naive_flops = math.prod(self.sizes.values()) * max(1, self.n_operands)
        self._plan: Plan | None = None
        self._chunk_plans: Any = None
        if self.itemsize:
            out = [self.sizes.get(x, 1) for x in self.equation.output]
            check_fits(out, self.itemsize, "einsum", "", "a result")
        if self.optimize != "auto" or self.memory_limit is not None:
            self._plan = self._choose()

    def _build(self, path: Any, chunks: dict[int, int] | None = None) -> Plan:
        """The lowering along `path`, of the whole operands or of chunks of labels."""
        if not chunks:
            shapes, sizes = self.shapes, self.sizes
        else:  # the chunked labels cut to their chunk (size-1 axes kept)
            shapes = tuple(
                tuple(chunks.get(x, d) if d != 1 else 1 for x, d in zip(lab, sh, strict=True))
                for lab, sh in zip(self.equation.inputs, self.shapes, strict=True)
            )
            sizes = None
        return build(self.equation, shapes, self.orders, self.boolean, path, self.merge, sizes)

    def _choose(self) -> Plan:
        """The cheapest lowering among the candidate orders, within ``memory_limit``."""
        found = candidates(
            self.equation, self.shapes, self.optimize, self.names, self.sizes, self.memory_limit
        )
        plans = [self._build(path) for path in found]
        plan = min(plans, key=lambda p: p.cost)
        limit = self.memory_limit
        if limit is not None and plan.peak > limit:
            fits = [p for p in plans if p.peak <= limit]
            plan = min(fits, key=lambda p: p.cost) if fits else self._sliced(plan, limit)
        if self.itemsize:
            cause = "einsum (pass memory_limit to cut it in chunks)"
            check_fits((plan.peak,), self.itemsize, cause, "", "an intermediate")
        return plan

    def _sliced(self, plan: Plan, limit: int) -> Plan:
        """`plan` with labels cut into chunks until every intermediate fits in `limit`."""
        sizes = self.sizes
        chunks: dict[int, int] = {}
        sub = plan
        while sub.peak > limit:
            step = max(sub.steps, key=lambda s: max(s.copies, s.temporary, s.result))
            lab = max(step.peak_labels or tuple(sizes), key=lambda x: chunks.get(x, sizes[x]))
            if chunks.get(lab, sizes[lab]) <= 1:  # every label of the peak is at 1
                lab = max(sizes, key=lambda x: chunks.get(x, sizes[x]))
                if chunks.get(lab, sizes[lab]) <= 1:
                    break
            chunks[lab] = (chunks.get(lab, sizes[lab]) + 1) // 2
            sub = self._build(plan.path, chunks)
        specs = []
        for lab, chunk in chunks.items():
            axes = tuple(
                tuple(a for a, x in enumerate(labs) if x == lab and sh[a] != 1)
                for labs, sh in zip(self.equation.inputs, self.shapes, strict=True)
            )
            out_axis = self.equation.output.index(lab) if lab in self.equation.output else None
            specs.append(SliceSpec(lab, sizes[lab], chunk, axes, out_axis))
        return dataclasses.replace(
            plan, instructions=(), n_slots=0, result=-1, steps=sub.steps, peak=sub.peak,
            slices=tuple(specs),
        )  # fmt: skip

    @property
    def planned(self) -> bool:
        """Whether the plan has been built."""
        return self._plan is not None

    @property
    def plan(self) -> Plan:
        """The contraction order lowered to primitive steps (built on first use)."""
        if self._plan is None:
            self._plan = self._choose()
        return self._plan

    @property
    def slices(self) -> tuple[SliceSpec, ...]:
        """The chunking ``memory_limit`` forces (none without a limit)."""
        return () if self.memory_limit is None else self.plan.slices

    def plan_for(self, chunks: dict[int, int]) -> Plan:
        """The plan of one chunk (labels cut to `chunks`); chunks of one shape share it."""
        if self._chunk_plans is None:
            self._chunk_plans = memo(64)(lambda items: self._build(self.plan.path, dict(items)))
        return self._chunk_plans(tuple(sorted(chunks.items())))  # type: ignore[no-any-return]
