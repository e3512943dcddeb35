"""What one call signature plans to: facts known at once, the lowered plan on demand.

A first call must not pay for work its implementation never uses. Parsing, the label
sizes (which validate the operands' shapes) and the naive FLOP count are cheap and
decide, for small contractions, that ``numpy.einsum``'s own loop wins; the contraction
order and the lowering of every step (:func:`portops._einsum.path.choose`) are built the
first time an implementation asks for :attr:`Lowering.plan`.

Only the default ``optimize="auto"`` without ``memory_limit`` is deferred: an explicit
path, a named path finder or a memory limit is planned at once, so that its errors
(a path that leaves operands, an unknown finder) are raised by the call that gave it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import _machine
from .._tracing import memo
from .._validate import check_fits
from .parse import Equation
from .path import choose, chunk_shapes
from .plan import Plan, SliceSpec, build, sizes_of

__all__ = ["Lowering"]


class Lowering:
    """The cheap facts of one planned signature, and its plan built on first use.

    Two threads asking for :attr:`plan` at once may both build it; they build the same
    plan and one of them is kept.
    """

    __slots__ = (
        "_chunk_plan",
        "_plan",
        "boolean",
        "equation",
        "itemsize",
        "memory_limit",
        "merge",
        "n_operands",
        "naive_flops",
        "names",
        "optimize",
        "orders",
        "shapes",
        "sizes",
    )

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
        self._chunk_plan: Callable[[tuple[tuple[int, int], ...]], Plan] | None = None
        if itemsize:
            out = [self.sizes.get(x, 1) for x in equation.output]
            check_fits(out, itemsize, "einsum", "", "a result")
        if optimize != "auto" or memory_limit is not None:
            self._plan = self._choose()

    def _choose(self) -> Plan:
        plan = self._search()
        if self.itemsize and plan.peak * self.itemsize > _machine.current().memory:
            check_fits(
                (plan.peak,), self.itemsize, "einsum (pass memory_limit to cut it in chunks)",
                "", "an intermediate",
            )  # fmt: skip
        return plan

    def _search(self) -> Plan:
        return choose(
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

    @property
    def planned(self) -> bool:
        """Whether the plan has been built."""
        return self._plan is not None

    @property
    def plan(self) -> Plan:
        """The contraction order lowered to primitive steps (built on first use)."""
        plan = self._plan
        if plan is None:
            plan = self._plan = self._choose()
        return plan

    @property
    def slices(self) -> tuple[SliceSpec, ...]:
        """The chunking ``memory_limit`` forces (none without a limit)."""
        return () if self.memory_limit is None else self.plan.slices

    def plan_for(self, chunks: dict[int, int]) -> Plan:
        """The plan of one chunk (labels cut to `chunks`); chunks of one shape share it."""
        if self._chunk_plan is None:
            self._chunk_plan = memo(64)(self._build_chunk)
        return self._chunk_plan(tuple(sorted(chunks.items())))

    def _build_chunk(self, chunks: tuple[tuple[int, int], ...]) -> Plan:
        eq = self.equation
        cs = chunk_shapes(eq, self.shapes, dict(chunks))
        return build(eq, cs, self.orders, self.boolean, self.plan.path, self.names, self.merge)
