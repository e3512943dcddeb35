"""What one call signature plans to: facts known at once, the lowered plan on demand.

A first call must not pay for work its implementation never uses. Parsing, the label
sizes (which validate the shapes) and the naive FLOP count are cheap and decide, for
small contractions, that ``numpy.einsum``'s own loop wins; the contraction order and the
lowering (:func:`portops._einsum.path.choose`) are built when first asked for. Only
``optimize="auto"`` without ``memory_limit`` waits: an explicit path, a named finder or
a memory limit is planned at once, so that its errors are raised by the call that gave
it.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _machine
from .._tracing import memo
from .._validate import check_fits
from .parse import Equation
from .path import choose, chunk_shapes
from .plan import Plan, SliceSpec, build, sizes_of

__all__ = ["Lowering"]


class Lowering:
    """The cheap facts of one planned signature, and its plan built on first use (two
    threads may both build it: the same plan, and one of them is kept)."""

    def __init__(
        self,
        equation: Equation,
        shapes: tuple[tuple[int, ...], ...],
        orders: tuple[tuple[int, ...], ...],
        boolean: bool,
        optimize: Any,
        memory_limit: int | None,
        names: dict[int, str],
        merge: bool,
        itemsize: int = 0,
    ) -> None:
        self.itemsize = itemsize  # of the result; 0: no memory check (lazy arrays)
        self.equation = equation
        self.shapes = shapes
        self.orders = orders
        self.boolean = boolean
        self.optimize = optimize
        self.memory_limit = memory_limit
        self.names = names
        self.merge = merge
        self.sizes = sizes_of(equation, shapes)  # raises for mismatched label sizes
        self.n_operands = len(shapes)
        # Every label's size, once per operand (what numpy.einsum's loop multiplies).
        self.naive_flops = math.prod(self.sizes.values()) * max(1, self.n_operands)
        self._plan: Plan | None = None
        self._chunk_plans: Any = None
        if itemsize:
            out = [self.sizes.get(x, 1) for x in equation.output]
            check_fits(out, itemsize, "einsum", "", "a result")
        if optimize != "auto" or memory_limit is not None:
            self._plan = self._choose()

    def _choose(self) -> Plan:
        plan = choose(
            self.equation,
            self.shapes,
            self.orders,
            self.boolean,
            self.optimize,
            self.memory_limit,
            self.names,
            self.merge,
            self.sizes,
        )
        if self.itemsize and plan.peak * self.itemsize > _machine.current().memory:
            check_fits(
                (plan.peak,), self.itemsize, "einsum (pass memory_limit to cut it in chunks)",
                "", "an intermediate",
            )  # fmt: skip
        return plan

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
            self._chunk_plans = memo(64)(self._build_chunk)
        return self._chunk_plans(tuple(sorted(chunks.items())))  # type: ignore[no-any-return]

    def _build_chunk(self, chunks: tuple[tuple[int, int], ...]) -> Plan:
        cs = chunk_shapes(self.equation, self.shapes, dict(chunks))
        return build(self.equation, cs, self.orders, self.boolean, self.plan.path, self.merge)
