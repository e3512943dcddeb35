"""One einsum plan written out as straight-line torch code, once per signature.

The plan interpreter (:func:`portops._einsum.execute.run`) spends about a microsecond
of Python per instruction, and the lowering lays every GEMM out as matrices (a dot
product becomes ``(1, K) @ (K, 1)`` and is reshaped back), a torch call of about a
microsecond each; on small operands that is most of the call, and more than
``torch.einsum``'s own parsing. With the signature fixed the shapes are known, so the
program is written once as Python source in which

- a reshape to the shape a value already has is no call at all, and the others are
  deferred until a value is used, so a consumer that takes the vector itself never
  sees the matrix it was reshaped to;
- each GEMM is the narrowest torch call that does it: ``dot`` for one inner product,
  ``mv`` for a matrix-vector product, ``mm``, ``bmm``, and ``outer`` for an outer
  product of two vectors.

``ij,ij->ij`` becomes ``a * b`` and ``i,i->`` ``torch.dot(a, b)``: 1-2 µs against
7-10 µs in ``torch.einsum`` (2-core Xeon, 32-element operands).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..._einsum.plan import Plan

__all__ = ["compile_plan"]

Shape = tuple[int, ...]
# About how many torch calls one TorchOps primitive makes (permutes, views, the GEMM).
OPS_CALLS = 3


class _Value:
    """A slot at compile time: the variable holding it, that tensor's shape, and the
    shape the plan means (a reshape not yet made)."""

    __slots__ = ("base", "name", "shape")

    def __init__(self, name: str, base: Shape, shape: Shape) -> None:
        self.name, self.base, self.shape = name, base, shape


class _Writer:
    """Accumulates the program's lines and the constants it refers to."""

    def __init__(self, ops: Any, dtype: Any, on_cpu: bool) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"torch": torch, "_ops": ops, "_dtype": dtype}
        self.count = 0
        # CUDA's dot/mv/mm refuse integers: those GEMMs stay with TorchOps.matmul.
        self.native_gemm = on_cpu or dtype.is_floating_point or dtype.is_complex

    def emit(self, expr: str, shape: Shape) -> _Value:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"    {name} = {expr}")
        return _Value(name, shape, shape)

    def made(self, v: _Value) -> str:
        """The variable holding `v` in its planned shape (a reshape if pending)."""
        if v.shape == v.base:
            return v.name
        made = self.emit(f"{v.name}.reshape({v.shape!r})", v.shape)
        v.name, v.base = made.name, v.shape  # later uses share the reshaped tensor
        return v.name

    def vector(self, v: _Value) -> str:
        """A 1-d tensor of `v`'s elements (`v` has at most one axis longer than 1)."""
        if len(v.base) == 1:
            return v.name
        return self.emit(f"{v.name}.reshape(-1)", (math.prod(v.shape),)).name


def _broadcast(a: Shape, b: Shape) -> Shape:
    return tuple(torch.broadcast_shapes(a, b))  # type: ignore[no-untyped-call]


def _matmul(w: _Writer, a: _Value, b: _Value) -> _Value:
    *batch_a, m, _ = a.shape
    *batch_b, _, n = b.shape
    batch = _broadcast(tuple(batch_a), tuple(batch_b))
    shape = (*batch, m, n)
    if w.native_gemm and not batch:
        if m == 1 and n == 1:
            r = w.emit(f"torch.dot({w.vector(a)}, {w.vector(b)})", ())
        elif n == 1:
            r = w.emit(f"torch.mv({w.made(a)}, {w.vector(b)})", (m,))
        elif m == 1:
            r = w.emit(f"torch.mv({w.made(b)}.t(), {w.vector(a)})", (n,))
        else:
            return w.emit(f"torch.mm({w.made(a)}, {w.made(b)})", shape)
        r.shape = shape
        return r
    if w.native_gemm and len(a.shape) == len(b.shape) == 3 and batch_a == batch_b:
        return w.emit(f"torch.bmm({w.made(a)}, {w.made(b)})", shape)
    return w.emit(f"_ops.matmul({w.made(a)}, {w.made(b)})", shape)


def _mul(w: _Writer, a: _Value, b: _Value) -> _Value:
    if len(a.shape) == len(b.shape) == 2 and a.shape[1] == 1 and b.shape[0] == 1:
        r = w.emit(f"torch.outer({w.vector(a)}, {w.vector(b)})", (a.shape[0], b.shape[1]))
        return r
    return w.emit(f"{w.made(a)} * {w.made(b)}", _broadcast(a.shape, b.shape))


def _reduced(shape: Shape, axes: Sequence[int]) -> Shape:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def compile_plan(plan: Plan, operands: Sequence[Any], ops: Any) -> Callable[..., Any] | None:
    """The plan as one Python function of the operands, for operands of these shapes
    and this dtype (the signature's); None for a plan with chunks (``memory_limit``).

    `ops` is the backend's :class:`~portops._backends.torch.einsum.TorchOps`, called
    for the primitives with no narrower torch spelling (diagonals, bool products,
    GEMMs that need its batch layout)."""
    if plan.slices:
        return None
    dtype = operands[0].dtype
    w = _Writer(ops, dtype, operands[0].device.type == "cpu")
    args = [f"a{i}" for i in range(len(operands))]
    vals: list[_Value | None] = [
        _Value(n, tuple(x.shape), tuple(x.shape)) for n, x in zip(args, operands, strict=True)
    ]
    vals.extend([None] * (plan.n_slots - len(vals)))
    for ins in plan.instructions:
        name = ins[0]
        if name in ("matmul", "mul", "matmul_bool", "logical_and"):
            a, b = vals[ins[1]], vals[ins[2]]
            assert a is not None and b is not None
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
        assert v is not None
        if name == "reshape":
            vals[ins[1]] = _Value(v.name, v.base, tuple(ins[2]))
        elif name == "permute":
            perm = tuple(ins[2])
            if perm != tuple(range(len(perm))):
                vals[ins[1]] = w.emit(
                    f"{w.made(v)}.permute({perm!r})", tuple(v.shape[i] for i in perm)
                )
        elif name == "swap":
            *lead, r, c = v.shape
            if r == 1 or c == 1:  # the same elements in the same order: a reshape
                vals[ins[1]] = _Value(v.name, v.base, (*lead, c, r))
            else:
                vals[ins[1]] = w.emit(f"{w.made(v)}.transpose(-1, -2)", (*lead, c, r))
        elif name == "sum":
            axes = tuple(ins[2])
            vals[ins[1]] = w.emit(
                f"{w.made(v)}.sum({axes!r}, dtype=_dtype)", _reduced(v.shape, axes)
            )
        elif name == "any":
            axes = tuple(ins[2])
            vals[ins[1]] = w.emit(f"_ops.any({w.made(v)}, {axes!r})", _reduced(v.shape, axes))
        elif name == "diag":
            axes = tuple(ins[2])
            shape = (*_reduced(v.shape, axes), v.shape[axes[0]])
            vals[ins[1]] = w.emit(f"_ops.diag({w.made(v)}, {axes!r})", shape)
        else:  # take/concat appear only in chunked plans
            return None
    result = vals[plan.result]
    assert result is not None
    returned = w.made(result)
    body = "".join(line + "\n" for line in w.lines)
    source = f"def program({', '.join(args)}):\n{body}    return {returned}\n"
    exec(compile(source, "<portops einsum program>", "exec"), w.names)
    program: Any = w.names["program"]
    # Its cost in torch calls: TorchOps primitives make several each.
    program.calls = sum(OPS_CALLS if "_ops." in line else 1 for line in w.lines)
    program.source = source
    return program  # type: ignore[no-any-return]
