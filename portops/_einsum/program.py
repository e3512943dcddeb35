"""One einsum plan written out as straight-line code, once per signature.

The plan interpreter (:func:`portops._einsum.execute.run`) spends about a microsecond
of Python per instruction, and the lowering lays every GEMM out as matrices (a dot
product becomes ``(1, K) @ (K, 1)`` and is reshaped back), a library call each; on
small operands that is most of the call, and more than the library's own ``einsum``
spends parsing. With the signature fixed the shapes are known, so the program is
written once as Python source in which

- a reshape to the shape a value already has is no call at all, and the others are
  deferred until a value is used, so a consumer that takes the vector itself never
  sees the matrix it was reshaped to;
- each GEMM is the narrowest call of the library that does it (:class:`Spelling`):
  for torch ``dot`` for one inner product, ``mv`` for a matrix-vector product, ``mm``,
  ``bmm``, and ``outer`` for an outer product of two vectors.

``ij,ij->ij`` becomes ``a * b`` and ``i,i->`` ``torch.dot(a, b)``: 1-2 µs against
7-10 µs in ``torch.einsum`` (2-core Xeon, 32-element operands).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._tables import EINSUM
from .plan import Plan

__all__ = ["Program", "Programs", "Spelling", "runner", "write_program"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """A plan written out: its source, the names it refers to, and its cost."""

    source: str
    names: dict[str, Any]
    calls: float  # about what one run costs, in library calls

    def build(self) -> Callable[..., Any]:
        """The function itself (``compile`` costs tens of microseconds: see
        :meth:`Programs.runner`)."""
        names = dict(self.names)
        exec(compile(self.source, "<portops einsum program>", "exec"), names)
        function: Callable[..., Any] = names["program"]
        return function


@dataclass(frozen=True)
class Spelling:
    """How one library writes the program's calls: format strings over the operands'
    variable names (``{a}``, ``{b}``), the library module bound as ``xp`` and the
    backend's plan primitives as ``_ops``. A GEMM spelled None goes to ``_ops.matmul``.
    """

    module: Any
    permute: str  # "{a}.permute({perm})"
    swap: str  # "{a}.transpose(-1, -2)"
    sum: str  # with the result dtype bound as _dtype
    dot: str | None
    mv: str | None
    vm: str | None  # vector @ matrix
    mm: str | None
    bmm: str | None
    batched: str | None  # several batch axes, operands small (SMALL_BATCHED)
    outer: str | None
    ops_calls: float  # about how many library calls one `_ops` primitive costs
    view_calls: float = 1.0  # what a reshape, transpose or permutation costs, in calls
    scalar_result: bool = False  # a 0-d result is returned as a scalar (NumPy's einsum)


class _Value:
    """A slot at compile time: the variable holding it, that array's shape, and the
    shape the plan means (a reshape not yet made)."""

    __slots__ = ("base", "name", "shape")

    def __init__(self, name: str, base: Shape, shape: Shape) -> None:
        self.name, self.base, self.shape = name, base, shape


class _Writer:
    """Accumulates the program's lines and the names it refers to."""

    def __init__(self, spelling: Spelling, ops: Any, dtype: Any, native_gemm: bool) -> None:
        self.spelling = spelling
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"xp": spelling.module, "_ops": ops, "_dtype": dtype}
        self.count = 0
        self.native_gemm = native_gemm
        self.calls = 0.0

    def emit(self, expr: str, shape: Shape, *, view: bool = False) -> _Value:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"    {name} = {expr}")
        s = self.spelling
        self.calls += s.view_calls if view else s.ops_calls if "_ops." in expr else 1
        return _Value(name, shape, shape)

    def made(self, v: _Value) -> str:
        """The variable holding `v` in its planned shape (a reshape if pending)."""
        if v.shape == v.base:
            return v.name
        made = self.emit(f"{v.name}.reshape({v.shape!r})", v.shape, view=True)
        v.name, v.base = made.name, v.shape  # later uses share the reshaped array
        return v.name

    def vector(self, v: _Value) -> str:
        """A 1-d array of `v`'s elements (`v` has at most one axis longer than 1)."""
        if len(v.base) == 1:
            return v.name
        return self.emit(f"{v.name}.reshape(-1)", (math.prod(v.shape),), view=True).name


def _broadcast(a: Shape, b: Shape) -> Shape:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return tuple(y if x == 1 else x for x, y in zip(a, b, strict=True))


def _gemm(w: _Writer, form: str | None, shape: Shape, base: Shape, **names: str) -> _Value | None:
    if form is None or not w.native_gemm:
        return None
    r = w.emit(form.format(**names), base)
    r.shape = shape
    return r


def _matmul(w: _Writer, a: _Value, b: _Value) -> _Value:
    s = w.spelling
    *batch_a, m, _ = a.shape
    *batch_b, _, n = b.shape
    batch = _broadcast(tuple(batch_a), tuple(batch_b))
    shape = (*batch, m, n)
    r = None
    if w.native_gemm and not batch:
        if m == 1 and n == 1 and s.dot:
            r = _gemm(w, s.dot, shape, (), a=w.vector(a), b=w.vector(b))
        elif n == 1 and s.mv:
            r = _gemm(w, s.mv, shape, (m,), a=w.made(a), b=w.vector(b))
        elif m == 1 and s.vm:
            r = _gemm(w, s.vm, shape, (n,), a=w.vector(a), b=w.made(b))
        elif m > 1 and n > 1:
            r = _gemm(w, s.mm, shape, shape, a=w.made(a), b=w.made(b))
    elif len(a.shape) == len(b.shape) == 3 and batch_a == batch_b:
        r = _gemm(w, s.bmm, shape, shape, a=w.made(a), b=w.made(b))
    elif math.prod(a.shape) + math.prod(b.shape) <= EINSUM["small_batched"]:
        r = _gemm(w, s.batched, shape, shape, a=w.made(a), b=w.made(b))
    return r or w.emit(f"_ops.matmul({w.made(a)}, {w.made(b)})", shape)


def _mul(w: _Writer, a: _Value, b: _Value) -> _Value:
    outer = w.spelling.outer
    if outer and len(a.shape) == len(b.shape) == 2 and a.shape[1] == 1 and b.shape[0] == 1:
        return w.emit(outer.format(a=w.vector(a), b=w.vector(b)), (a.shape[0], b.shape[1]))
    return w.emit(f"{w.made(a)} * {w.made(b)}", _broadcast(a.shape, b.shape))


def _reduced(shape: Shape, axes: Sequence[int]) -> Shape:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def write_program(
    plan: Plan, dtype: Any, ops: Any, spelling: Spelling, *, native_gemm: bool
) -> Program | None:
    """The plan as one Python function of the operands, for operands of the plan's
    shapes and of `dtype` (the signature's); None for a plan with chunks
    (``memory_limit``).

    `ops` is the backend's plan primitives (an
    :class:`~portops._einsum.execute.ArrayAPIOps`), called for what has no narrower
    spelling (diagonals, bool products, GEMMs that need its layout checks);
    `native_gemm` False sends every GEMM there. The function's ``calls`` attribute
    estimates the library calls it makes, its ``source`` is its text.
    """
    if plan.slices:
        return None
    w = _Writer(spelling, ops, dtype, native_gemm)
    args = [f"a{i}" for i in range(len(plan.shapes))]
    vals: list[Any] = [
        _Value(n, tuple(shape), tuple(shape)) for n, shape in zip(args, plan.shapes, strict=True)
    ]
    vals.extend([None] * (plan.n_slots - len(vals)))
    for ins in plan.instructions:
        name = ins[0]
        if name in ("matmul", "mul", "matmul_bool", "logical_and"):
            a, b = vals[ins[1]], vals[ins[2]]
            if name == "matmul":
                vals[ins[3]] = _matmul(w, a, b)
            elif name == "mul":
                vals[ins[3]] = _mul(w, a, b)
            else:
                shape = (
                    _broadcast(a.shape, b.shape)
                    if name == "logical_and"
                    else (*_broadcast(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
                )
                vals[ins[3]] = w.emit(f"_ops.{name}({w.made(a)}, {w.made(b)})", shape)
            continue
        v = vals[ins[1]]
        if name == "reshape":
            vals[ins[1]] = _Value(v.name, v.base, tuple(ins[2]))
        elif name == "permute":
            perm = tuple(ins[2])
            if perm != tuple(range(len(perm))):
                expr = spelling.permute.format(a=w.made(v), perm=perm)
                vals[ins[1]] = w.emit(expr, tuple(v.shape[i] for i in perm), view=True)
        elif name == "swap":
            *lead, r, c = v.shape
            if r == 1 or c == 1:  # the same elements in the same order: a reshape
                vals[ins[1]] = _Value(v.name, v.base, (*lead, c, r))
            else:
                expr = spelling.swap.format(a=w.made(v))
                vals[ins[1]] = w.emit(expr, (*lead, c, r), view=True)
        elif name == "sum":
            axes = tuple(ins[2])
            expr = spelling.sum.format(a=w.made(v), axes=axes)
            vals[ins[1]] = w.emit(expr, _reduced(v.shape, axes))
        elif name == "any":
            axes = tuple(ins[2])
            vals[ins[1]] = w.emit(f"_ops.any({w.made(v)}, {axes!r})", _reduced(v.shape, axes))
        elif name == "diag":  # the axes moved last, then one diagonal per extra axis
            axes = tuple(ins[2])
            others = _reduced(tuple(range(len(v.shape))), axes)
            perm = (*others, *axes)
            x = w.made(v)
            if perm != tuple(range(len(perm))):
                x = w.emit(spelling.permute.format(a=x, perm=perm), (), view=True).name
            for _ in axes[1:]:
                x = w.emit(f"{x}.diagonal(0, -2, -1)", (), view=True).name
            shape = (*_reduced(v.shape, axes), v.shape[axes[0]])
            vals[ins[1]] = _Value(x, shape, shape)
        else:  # take/concat appear only in chunked plans
            return None
    returned = w.made(vals[plan.result])
    if spelling.scalar_result and vals[plan.result].shape == ():
        returned += "[()]"
    body = "".join(line + "\n" for line in w.lines)
    source = f"def program({', '.join(args)}):\n{body}    return {returned}\n"
    return Program(source, w.names, w.calls)


class Programs:
    """One backend's programs by signature, at most `max_size` (then cleared).

    Keyed by the plan object (kept alive here, so its id stays unique) and what else
    the program depends on (the dtype, the device type): a backend's selection rule may
    write one to count its calls, and its planner then takes the same one.
    """

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
        assert program is not None, "a plan with chunks has no program"
        if len(self._programs) >= self.max_size:
            self._programs.clear()
        self._programs[full] = (plan, program)  # one dict store: atomic
        return program


def runner(program: Callable[[], Program], first: Callable[..., Any]) -> Callable[..., Any]:
    """A function of the operands that runs `first` (the plan interpreter) on its first
    call and the program (`program()`, written and built then) from the second on: a
    signature called once pays for neither the writing nor ``compile``."""
    current: list[Callable[..., Any]] = []

    def once(*operands: Any) -> Any:
        current[0] = build
        return first(*operands)

    def build(*operands: Any) -> Any:
        current[0] = program().build()
        return current[0](*operands)

    current.append(once)

    def run(*operands: Any) -> Any:
        return current[0](*operands)

    return run
