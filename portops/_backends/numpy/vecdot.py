"""vecdot on NumPy: ``np.vecdot``, einsum's C loop, or a matrix product.

None of these makes a product temporary; which wins depends on how many vectors there
are, how long and how strided (:func:`choose`). The torch CPU specialisation runs the
same choice on zero-copy views (:func:`choose_and_plan`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from ... import _machine, extend
from ..._ops.vecdot import VecdotArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority
from .c_loops import c_einsum

__all__ = ["choose", "choose_and_plan"]

_EQUATION = "...i,...i->..."
Run = Callable[[np.ndarray, np.ndarray], Any]


def _unit(x: np.ndarray, axis: int) -> bool:
    return x.shape[axis] <= 1 or x.strides[axis] == x.itemsize


def _gemm_dtype(x1: np.ndarray, x2: np.ndarray) -> bool:
    """Single or double precision of one dtype (NumPy's float16 matmul sums in float16)."""
    return x1.dtype == x2.dtype and x1.dtype.char in "fdFD"


def _one_vector(x1: np.ndarray, x2: np.ndarray, axis: int) -> bool:
    n = x1.shape[axis]
    return n >= 2 and (x1.size == n) != (x2.size == n) and min(x1.ndim, x2.ndim) >= -axis


def _outer_dims(s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[list[int], ...] | None:
    """Batch dims (of the broadcast shape, vector axis last) as (both, x1 only, x2 only).

    None unless each input has a dimension of length > 1 that the other broadcasts:
    then every x1 vector meets many x2 vectors and one GEMM does the work.
    """
    both: list[int] = []
    only1: list[int] = []
    only2: list[int] = []
    for i, (a, b) in enumerate(zip(s1[:-1], s2[:-1], strict=True)):
        if a > 1 and b > 1:
            both.append(i)
        elif a > 1:
            only1.append(i)
        elif b > 1:
            only2.append(i)
    return (both, only1, only2) if only1 and only2 else None


def _aligned(x1: np.ndarray, x2: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs with the same number of dims and the contracted axis last."""
    ndim = max(x1.ndim, x2.ndim)
    x1 = np.moveaxis(x1.reshape((1,) * (ndim - x1.ndim) + x1.shape), axis, -1)
    x2 = np.moveaxis(x2.reshape((1,) * (ndim - x2.ndim) + x2.shape), axis, -1)
    return x1, x2


def choose(x1: np.ndarray, x2: np.ndarray, axis: int) -> tuple[str, str]:
    """(strategy, rule) for NumPy operands (or zero-copy views of tensors)."""
    n = x1.shape[axis]
    if x1.shape != x2.shape and _gemm_dtype(x1, x2):
        if _one_vector(x1, x2, axis):
            return "matvec", "one vector against many: BLAS's GEMV, on its threads"
        if n >= 2 and _outer_dims(*(a.shape for a in _aligned(x1, x2, axis))) is not None:
            return "gemm", "each input broadcasts along a dimension of the other: one GEMM"
    size = max(x1.size, x2.size)
    unit = _unit(x1, axis) and _unit(x2, axis)
    if size <= n or (unit and size <= NUMPY["vecdot_few"] * max(n, 1)):
        return "vecdot", f"at most {NUMPY['vecdot_few']} vectors: np.vecdot's per-vector cost"
    if not unit:
        return "einsum", "vectors along a strided axis: einsum's loop runs across them"
    if n >= NUMPY["vecdot_short"]:
        return "vecdot", f"contiguous vectors of {NUMPY['vecdot_short']}+ elements: np.vecdot"
    if n * x1.itemsize <= NUMPY["column_bytes"] and x1.ndim == 2 and x1.shape == x2.shape:
        fits = x1.nbytes + x2.nbytes < _machine.current().cache // 2
        if axis == -1 and (n <= 2 or fits):
            return "columns", (
                f"rows of at most {NUMPY['column_bytes']} bytes: one pass per column "
                "(two at most once the inputs leave half the cache)"
            )
    return "einsum", f"short vectors (< {NUMPY['vecdot_short']}): einsum's loop, no restarts"


def _shaped(r: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`r` (an array or a NumPy scalar) as an ndarray of the call's result shape."""
    r = np.asarray(r)
    return r if r.shape == shape else r.reshape(shape)


def _plan_vecdot(axis: int, shape: tuple[int, ...]) -> Run:
    return lambda x1, x2: _shaped(np.vecdot(x1, x2, axis=axis), shape)  # type: ignore[call-overload]


def _plan_einsum(
    x1: np.ndarray, axis: int, shape: tuple[int, ...], order: Literal["K", "F"]
) -> Run:
    conj = x1.dtype.kind == "c"
    half = np.result_type(x1.dtype) == np.float16

    def run(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        if conj:
            x1 = np.conj(x1)
        if axis != -1:
            x1, x2 = np.moveaxis(x1, axis, -1), np.moveaxis(x2, axis, -1)
        if half or x1.dtype == np.float16 or x2.dtype == np.float16:
            # einsum would accumulate into a float16 output: sum in float32 instead.
            r = c_einsum(_EQUATION, x1, x2, dtype=np.float32, order=order)
            return _shaped(r, shape).astype(np.result_type(x1, x2))
        return _shaped(c_einsum(_EQUATION, x1, x2, order=order), shape)

    return run


def _plan_matvec(x1: np.ndarray, x2: np.ndarray, axis: int, shape: tuple[int, ...]) -> Run:
    """``conj(x1) . x2`` as one matrix-vector product (one input a single vector)."""
    n = x1.shape[axis]
    first_is_many = x2.size == n
    complex_ = x1.dtype.kind == "c"

    def run(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        many, one = (x1, x2) if first_is_many else (x2, x1)
        if axis != -1:
            many = np.moveaxis(many, axis, -1)
        one = one.reshape(n)
        if complex_:  # conj(x1) . x2: conj(x1 . conj(x2)), or conj(x1) times the matrix
            if first_is_many:
                return _shaped(np.conj(np.matmul(many, np.conj(one))), shape)
            one = np.conj(one)
        return _shaped(np.matmul(many, one), shape)

    return run


def _plan_gemm(axis: int, shape: tuple[int, ...]) -> Run:
    """Outer-product broadcasting as one batched GEMM ``conj(x1) @ x2.T``."""

    def run(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        x1, x2 = _aligned(x1, x2, axis)
        ndim = x1.ndim
        dims = _outer_dims(x1.shape, x2.shape)
        assert dims is not None  # the signature fixes the shapes
        both, only1, only2 = dims
        rest = [i for i in range(ndim - 1) if i not in both + only1 + only2]
        k = x1.shape[-1]
        nb = math.prod(x1.shape[i] for i in both)
        a = x1.transpose(both + only1 + only2 + rest + [ndim - 1]).reshape(nb, -1, k)
        b = x2.transpose(both + only2 + only1 + rest + [ndim - 1]).reshape(nb, -1, k)
        if a.dtype.kind == "c":
            a = a.conj()
        r = np.matmul(a, b.transpose(0, 2, 1))
        r = r.reshape([x1.shape[i] for i in both + only1] + [x2.shape[i] for i in only2])
        r = r.reshape(r.shape + (1,) * len(rest))
        return _shaped(np.transpose(r, np.argsort(both + only1 + only2 + rest)), shape)

    return run


def _direct(strategy: str, x1: np.ndarray, x2: np.ndarray, axis: int, keepdims: bool) -> Any:
    """The plan as one NumPy call, where the call needs nothing around it (the commonest
    calls: real dtypes of one kind, the last axis, no keepdims, two dimensions at most;
    a tiny call is mostly its Python), else None."""
    if keepdims or axis != -1 or x1.dtype != x2.dtype or x1.dtype.char not in "fd":
        return None
    if strategy == "matvec" and x1.ndim + x2.ndim == 3:
        many, first = (x1, True) if x1.ndim == 2 else (x2, False)
        # ndarray.dot reaches the same GEMV as np.matmul at a third of its fixed cost,
        # for a matrix it does not copy first (C or Fortran order).
        dot = many.flags.c_contiguous or many.flags.f_contiguous
        if first:
            return np.ndarray.dot if dot else np.matmul
        return (lambda x1, x2: x2.dot(x1)) if dot else (lambda x1, x2: np.matmul(x2, x1))
    if x1.shape != x2.shape or x1.ndim != 2:
        return None
    if strategy == "vecdot":
        return np.vecdot
    if strategy in ("einsum", "columns"):
        # A partial runs in C: no Python frame between the call and the loop.
        order = {"order": "F"} if strategy == "columns" else {}
        return functools.partial(c_einsum, _EQUATION, **order)
    return None


def choose_and_plan(
    x1: np.ndarray, x2: np.ndarray, axis: int, keepdims: bool, name: str | None = None
) -> tuple[str, str, Run]:
    """(strategy, rule, plan) for NumPy operands of this signature; `name` forces a
    strategy. The plan returns an ndarray of the call's result shape."""
    strategy, reason = choose(x1, x2, axis) if name is None else (name, "forced")
    direct = _direct(strategy, x1, x2, axis, keepdims)
    if direct is not None:
        return strategy, reason, direct
    shape = list(np.broadcast_shapes(x1.shape, x2.shape))
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    out = tuple(shape)
    if strategy == "vecdot":
        plan = _plan_vecdot(axis, out)
    elif strategy == "einsum":
        plan = _plan_einsum(x1, axis, out, "K")
    elif strategy == "columns":
        plan = _plan_einsum(x1, axis, out, "F")
    elif strategy == "matvec":
        plan = _plan_matvec(x1, x2, axis, out)
    elif strategy == "gemm":
        plan = _plan_gemm(axis, out)
    else:
        raise ValueError(f"no NumPy vecdot strategy {strategy!r}")
    return strategy, reason, plan


def applies(name: str, x1: np.ndarray, x2: np.ndarray, axis: int) -> str | None:
    """None when strategy `name` can compute vecdot of these operands, else why not."""
    if name in ("matvec", "gemm"):
        if not _gemm_dtype(x1, x2):
            return "BLAS: single or double precision of one dtype"
        if name == "matvec" and not _one_vector(x1, x2, axis):
            return "not one vector against many"
        aligned = _aligned(x1, x2, axis)
        if name == "gemm" and (
            x1.shape[axis] < 2 or _outer_dims(*(v.shape for v in aligned)) is None
        ):
            return "no dimension of each input that the other broadcasts"
    return None


def _strategy(name: str, summary: str) -> Strategy:
    def plan(a: VecdotArgs) -> Run:
        return choose_and_plan(a.x1, a.x2, a.axis, a.keepdims, name)[2]

    return Strategy(name, summary, plan, applies=lambda a: applies(name, a.x1, a.x2, a.axis))


STRATEGIES = Strategies(
    [
        _strategy("vecdot", "np.vecdot: one inner-loop call per vector, no temporary"),
        _strategy("einsum", "einsum's C loop over every vector at once, no temporary"),
        _strategy("columns", "einsum in Fortran order: one pass per column of short rows"),
        _strategy("matvec", "one vector against many: a BLAS matrix-vector product"),
        _strategy("gemm", "outer-product broadcasting: one batched GEMM"),
    ],
    choose=lambda a: choose(a.x1, a.x2, a.axis),
)

extend.register(
    "vecdot",
    "numpy",
    libraries=("numpy",),
    devices=("cpu",),
    priority=Priority.SPECIALIZED,
    summary="np.vecdot, einsum's loop or BLAS, whichever reads least (no product temporary)",
    strategies=STRATEGIES,
)
