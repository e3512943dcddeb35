"""One einsum plan written out as straight-line code, once per signature: no no-op
reshapes, the narrowest GEMM call per step (saves the interpreter's per-step overhead).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from numpy import broadcast_shapes

from .._tables import EINSUM
from .plan import Plan

__all__ = ["Program", "Programs", "Spelling", "runner", "write_program"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """A plan written out: its source, the names it uses, and its cost in library calls."""

    source: str
    names: dict[str, Any]
    calls: float

    def build(self) -> Callable[..., Any]:
        """The function itself (``compile`` costs tens of microseconds: see :func:`runner`)."""
        names = dict(self.names)
        exec(compile(self.source, "<portops einsum program>", "exec"), names)
        return cast("Callable[..., Any]", names["program"])


@dataclass(frozen=True)
class Spelling:
    """How one library writes the program's calls (format strings; None: ``_ops.matmul``)."""

    module: Any
    permute: str  # "{a}.permute({perm})"
    swap: str  # "{a}.transpose(-1, -2)"
    sum: str  # with the result dtype bound as _dtype
    dot: str | None
    mv: str | None
    vm: str | None  # vector @ matrix
    mm: str | None
    bmm: str | None
    batched: str | None  # several batch axes, operands small (EINSUM["small_batched"])
    outer: str | None
    ops_calls: float  # about how many library calls one `_ops` primitive costs
    view_calls: float = 1.0  # what a reshape, transpose or permutation costs, in calls
    scalar_result: bool = False  # a 0-d result is returned as a scalar (NumPy's einsum)


class _Value:
    """A slot while writing: its variable, that array's shape, and the planned shape."""

    __slots__ = ("base", "name", "shape")

    def __init__(self, name: str, base: Shape, shape: Shape | None = None) -> None:
        self.name = name
        self.base = base
        self.shape = base if shape is None else shape


def _reduced(shape: Shape, axes: Sequence[int]) -> Shape:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class _Writer:
    """Accumulates the program's lines and estimates the calls they make."""

    def __init__(self, spelling: Spelling, native_gemm: bool) -> None:
        self.spelling = spelling
        self.native_gemm = native_gemm
        self.lines: list[str] = []
        self.calls = 0.0

    def emit(self, expr: str, shape: Shape, *, view: bool = False) -> _Value:
        name = f"v{len(self.lines)}"
        self.lines.append(f"    {name} = {expr}")
        s = self.spelling
        self.calls += s.view_calls if view else s.ops_calls if "_ops." in expr else 1
        return _Value(name, shape)

    def made(self, v: _Value) -> str:
        """The variable holding `v` in its planned shape (a reshape if pending)."""
        if v.shape != v.base:
            made = self.emit(f"{v.name}.reshape({v.shape!r})", v.shape, view=True)
            v.name, v.base = made.name, v.shape  # later uses share the reshaped array
        return v.name

    def vector(self, v: _Value) -> str:
        """A 1-d array of `v`'s elements (`v` has at most one axis longer than 1)."""
        if len(v.base) == 1:
            return v.name
        return self.emit(f"{v.name}.reshape(-1)", (math.prod(v.shape),), view=True).name

    def matmul(self, a: _Value, b: _Value) -> _Value:
        s = self.spelling
        *batch_a, m, _ = a.shape
        *batch_b, _, n = b.shape
        batch = broadcast_shapes(tuple(batch_a), tuple(batch_b))
        shape = (*batch, m, n)
        form, base, x, y = None, shape, "", ""
        if self.native_gemm and not batch:
            if m == 1 and n == 1 and s.dot:
                form, base, x, y = s.dot, (), self.vector(a), self.vector(b)
            elif n == 1 and s.mv:
                form, base, x, y = s.mv, (m,), self.made(a), self.vector(b)
            elif m == 1 and s.vm:
                form, base, x, y = s.vm, (n,), self.vector(a), self.made(b)
            elif m > 1 and n > 1:
                form = s.mm
        elif len(a.shape) == len(b.shape) == 3 and batch_a == batch_b:
            form = s.bmm
        elif math.prod(a.shape) + math.prod(b.shape) <= EINSUM["small_batched"]:
            form = s.batched
        if form is None or not self.native_gemm:
            return self.emit(f"_ops.matmul({self.made(a)}, {self.made(b)})", shape)
        r = self.emit(form.format(a=x or self.made(a), b=y or self.made(b)), base)
        r.shape = shape
        return r

    def mul(self, a: _Value, b: _Value) -> _Value:
        outer = self.spelling.outer
        if outer and len(a.shape) == len(b.shape) == 2 and a.shape[1] == 1 and b.shape[0] == 1:
            expr = outer.format(a=self.vector(a), b=self.vector(b))
            return self.emit(expr, (a.shape[0], b.shape[1]))
        return self.emit(f"{self.made(a)} * {self.made(b)}", broadcast_shapes(a.shape, b.shape))


def write_program(
    plan: Plan, dtype: Any, ops: Any, spelling: Spelling, *, native_gemm: bool
) -> Program:
    """The plan (not chunked) as one Python function of operands of its shapes and
    `dtype`. `ops` runs what has no spelling; `native_gemm` False: every GEMM."""
    w = _Writer(spelling, native_gemm)
    args = [f"a{i}" for i in range(len(plan.shapes))]
    vals: list[Any] = [_Value(n, tuple(s)) for n, s in zip(args, plan.shapes, strict=True)]
    vals.extend([None] * (plan.n_slots - len(vals)))
    for name, slot, *rest in plan.instructions:
        v = vals[slot]
        if name == "matmul":
            vals[rest[1]] = w.matmul(v, vals[rest[0]])
        elif name == "mul":
            vals[rest[1]] = w.mul(v, vals[rest[0]])
        elif name in ("matmul_bool", "logical_and"):
            b = vals[rest[0]]
            if name == "logical_and":
                shape = broadcast_shapes(v.shape, b.shape)
            else:
                shape = (*broadcast_shapes(v.shape[:-2], b.shape[:-2]), v.shape[-2], b.shape[-1])
            vals[rest[1]] = w.emit(f"_ops.{name}({w.made(v)}, {w.made(b)})", shape)
        elif name == "reshape":
            vals[slot] = _Value(v.name, v.base, tuple(rest[0]))
        elif name == "permute":
            perm = tuple(rest[0])
            expr = spelling.permute.format(a=w.made(v), perm=perm)
            vals[slot] = w.emit(expr, tuple(v.shape[i] for i in perm), view=True)
        elif name == "swap":
            *lead, r, c = v.shape
            if r == 1 or c == 1:  # the same elements in the same order: a reshape
                vals[slot] = _Value(v.name, v.base, (*lead, c, r))
            else:
                vals[slot] = w.emit(spelling.swap.format(a=w.made(v)), (*lead, c, r), view=True)
        elif name in ("sum", "any"):
            axes = tuple(rest[0])
            expr = spelling.sum if name == "sum" else "_ops.any({a}, {axes!r})"
            vals[slot] = w.emit(expr.format(a=w.made(v), axes=axes), _reduced(v.shape, axes))
        elif name == "diag":  # the axes moved last, then one diagonal per extra axis
            axes = tuple(rest[0])
            perm = (*_reduced(tuple(range(len(v.shape))), axes), *axes)
            x = w.made(v)
            if perm != tuple(range(len(perm))):
                x = w.emit(spelling.permute.format(a=x, perm=perm), (), view=True).name
            for _ in axes[1:]:
                x = w.emit(f"{x}.diagonal(0, -2, -1)", (), view=True).name
            vals[slot] = _Value(x, (*_reduced(v.shape, axes), v.shape[axes[0]]))
    returned = w.made(vals[plan.result])
    if spelling.scalar_result and vals[plan.result].shape == ():
        returned += "[()]"
    body = "".join(line + "\n" for line in w.lines)
    source = f"def program({', '.join(args)}):\n{body}    return {returned}\n"
    return Program(source, {"xp": spelling.module, "_ops": ops, "_dtype": dtype}, w.calls)


class Programs:
    """One backend's programs, at most `max_size` (then cleared), by plan (kept alive
    here, so its id stays unique), dtype and `key` (the device type)."""

    def __init__(self, spelling: Spelling, max_size: int = 256) -> None:
        self.spelling = spelling
        self.max_size = max_size
        self._programs: dict[tuple[Any, ...], tuple[Plan, Program]] = {}

    def get(
        self, plan: Plan, dtype: Any, ops: Any, key: tuple[Any, ...], native_gemm: bool
    ) -> Program:
        full = (id(plan), dtype, *key)
        hit = self._programs.get(full)
        if hit is not None:
            return hit[1]
        program = write_program(plan, dtype, ops, self.spelling, native_gemm=native_gemm)
        if len(self._programs) >= self.max_size:
            self._programs.clear()
        self._programs[full] = (plan, program)  # one dict store: atomic
        return program


def runner(program: Callable[[], Program], first: Callable[..., Any]) -> Callable[..., Any]:
    """A function that runs `first` (the interpreter) on its first call and `program()`,
    written and built then, from the second on: a call made once compiles nothing."""

    def once(*operands: Any) -> Any:
        current[0] = build
        return first(*operands)

    def build(*operands: Any) -> Any:
        current[0] = program().build()
        return current[0](*operands)

    current: list[Callable[..., Any]] = [once]

    def run(*operands: Any) -> Any:
        return current[0](*operands)

    return run
