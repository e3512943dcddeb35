"""Run a lowered einsum plan with one backend's primitives: :class:`ArrayAPIOps` in
the array API standard only (no mutation: ``jax.jit``, lazy Dask, array-api-strict),
subclassed by backends where they have something faster."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .plan import BINARY_OPS, Plan

__all__ = ["ArrayAPIOps", "cast", "run", "with_casts"]


class ArrayAPIOps:
    """The primitives a plan uses, written against an array API namespace."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def astype(self, x: Any, dtype: Any) -> Any:
        return self.xp.astype(x, dtype)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(x, shape)

    def permute(self, x: Any, perm: tuple[int, ...]) -> Any:
        return self.xp.permute_dims(x, perm)

    def swap(self, x: Any) -> Any:
        return self.xp.matrix_transpose(x)

    def diag(self, x: Any, axes: tuple[int, ...]) -> Any:
        """Diagonal over `axes` (equal sizes), put last."""
        others = [i for i in range(x.ndim) if i not in axes]
        x = self.permute(x, (*others, *axes))
        if hasattr(x, "diagonal"):  # NumPy, torch, CuPy, JAX: a view where they can
            for _ in axes[1:]:
                x = x.diagonal(0, -2, -1)
            return x
        # Else reshape to n**k and take every (n**k - 1) / (n - 1)-th element.
        n, k = x.shape[-1], len(axes)
        x = self.reshape(x, (*x.shape[: len(others)], n**k))
        return x[..., :: (n**k - 1) // (n - 1) if n > 1 else 1]

    def sum(self, x: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.sum(x, axis=axes, dtype=x.dtype)

    def any(self, x: Any, axes: tuple[int, ...]) -> Any:
        return self.xp.any(x, axis=axes)

    def mul(self, a: Any, b: Any) -> Any:
        return a * b

    def logical_and(self, a: Any, b: Any) -> Any:
        return self.xp.logical_and(a, b)

    def matmul(self, a: Any, b: Any) -> Any:
        r = self.xp.matmul(a, b)
        # dask promotes integer matmuls to int64; keep the operands' (result) dtype.
        return r if r.dtype == a.dtype else self.xp.astype(r, a.dtype)

    def matmul_bool(self, a: Any, b: Any) -> Any:
        """``matmul`` refuses bool: count the true products in floats (exact below 2**24
        terms in float32), which BLAS multiplies."""
        count = self.xp.float32 if a.shape[-1] < 2**24 else self.xp.float64
        return self.matmul(self.astype(a, count), self.astype(b, count)) != 0

    def take(self, x: Any, axis: int, start: int, stop: int) -> Any:
        return x[(*(slice(None),) * axis, slice(start, stop), ...)]

    def concat(self, parts: Sequence[Any], axis: int) -> Any:
        return self.xp.concat(list(parts), axis=axis)

    def add(self, a: Any, b: Any, boolean: bool) -> Any:
        return self.xp.logical_or(a, b) if boolean else a + b


def cast(operands: Sequence[Any], dtype: Any, ops: ArrayAPIOps) -> list[Any]:
    """Operands in the result dtype (numpy's rule: compute in the result type)."""
    return [x if x.dtype == dtype else ops.astype(x, dtype) for x in operands]


def with_casts(
    a: Any, ops: ArrayAPIOps, copy: Callable[[Any], Any], body: Callable[..., Any]
) -> Callable[..., Any]:
    """`body` as a plan of the call's operands: cast as needed, aliasing results copied."""
    dtype = a.dtype
    plan: Callable[..., Any] = (lambda *xs: body(*cast(xs, dtype, ops))) if a.casts else body
    return (lambda *xs: copy(plan(*xs))) if a.may_alias else plan


def run(
    plan: Plan,
    operands: Sequence[Any],
    ops: ArrayAPIOps,
    plan_for: Callable[[dict[int, int]], Plan],
) -> Any:
    """Execute `plan` on `operands` (already in the result dtype)."""
    if plan.slices:
        return _run_sliced(plan, list(operands), ops, plan_for, 0, {})
    vals: list[Any] = list(operands) + [None] * (plan.n_slots - len(operands))
    for ins in plan.instructions:
        name = ins[0]
        if name in BINARY_OPS:
            vals[ins[3]] = getattr(ops, name)(vals[ins[1]], vals[ins[2]])
        elif name == "swap":
            vals[ins[1]] = ops.swap(vals[ins[1]])
        else:
            vals[ins[1]] = getattr(ops, name)(vals[ins[1]], ins[2])
    return vals[plan.result]


def _run_sliced(
    plan: Plan,
    operands: list[Any],
    ops: ArrayAPIOps,
    plan_for: Callable[[dict[int, int]], Plan],
    level: int,
    chunks: dict[int, int],
) -> Any:
    """Loop over chunks of one label: concatenate (kept label) or add (summed label)."""
    spec = plan.slices[level]
    parts: list[Any] = []
    total: Any = None
    for start in range(0, spec.size, spec.chunk):
        stop = min(start + spec.chunk, spec.size)
        sliced = []
        for x, axes in zip(operands, spec.operand_axes, strict=True):
            for ax in axes:
                x = ops.take(x, ax, start, stop)
            sliced.append(x)
        inner = {**chunks, spec.label: stop - start}
        if level + 1 < len(plan.slices):
            r = _run_sliced(plan, sliced, ops, plan_for, level + 1, inner)
        else:
            r = run(plan_for(inner), sliced, ops, plan_for)
        if spec.output_axis is None:
            total = r if total is None else ops.add(total, r, plan.boolean)
        else:
            parts.append(r)
    if spec.output_axis is None:
        return total
    return parts[0] if len(parts) == 1 else ops.concat(parts, spec.output_axis)
