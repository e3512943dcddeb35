"""NumPy einsum, two strategies: ``lowering``, the batched-matmul lowering with NumPy's
own functions (views where possible), making sure every matrix handed to ``matmul`` is
one BLAS can read; and ``loop``, ``numpy.einsum``'s own C loop, where no GEMM is to be
had or the operands are tiny (see :func:`loop_wins`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from ... import extend
from ..._einsum.execute import ArrayAPIOps, cast, run
from ..._einsum.plan import Step
from ..._einsum.program import Programs, Spelling, runner
from ..._ops.einsum import EinsumArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority
from .c_loops import c_einsum

__all__ = ["copy_if_view", "loop_order", "loop_wins", "tiny"]


def _blas_ready(x: np.ndarray) -> bool:
    """True when one of the last two axes has unit stride (BLAS's transpose flag covers
    the other layout); otherwise NumPy's matmul falls back to a slow loop."""
    if x.ndim < 2:
        return True
    m, n = x.shape[-2:]
    s_m, s_n = x.strides[-2:]
    item = x.itemsize
    return (s_n == item and s_m >= n * item) or (s_m == item and s_n >= m * item)


class NumpyOps(ArrayAPIOps):
    """Plan primitives as NumPy calls."""

    def __init__(self) -> None:
        super().__init__(np)

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.astype(dtype)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.reshape(shape)  # x may be a NumPy scalar (a sum to 0-d)

    def permute(self, x: Any, perm: tuple[int, ...]) -> Any:
        return x.transpose(perm)

    def swap(self, x: Any) -> Any:
        return x.swapaxes(-1, -2)

    def diag(self, x: Any, axes: tuple[int, ...]) -> Any:
        others = [i for i in range(x.ndim) if i not in axes]
        x = x.transpose((*others, *axes))
        for _ in range(len(axes) - 1):
            x = np.diagonal(x, axis1=-2, axis2=-1)  # a view
        return x

    def sum(self, x: Any, axes: tuple[int, ...]) -> Any:
        return np.sum(x, axis=axes, dtype=x.dtype)

    def any(self, x: Any, axes: tuple[int, ...]) -> Any:
        return np.any(x, axis=axes)

    def logical_and(self, a: Any, b: Any) -> Any:
        return np.logical_and(a, b)

    def matmul(self, a: Any, b: Any) -> Any:
        if a.ndim == 2 and b.ndim == 2 and a.dtype.kind in "fc":
            # A matrix-vector product: numpy.dot's BLAS gemv, where NumPy's matmul runs it
            # 2-3x slower (4096 x 1024 float32: 2.7 ms against 7.2 ms, 2-core AMD EPYC).
            if b.shape[1] == 1:
                return np.dot(a, b[:, 0])[:, None]
            if a.shape[0] == 1:
                return np.dot(a[0], b)[None, :]
        if a.dtype.kind in "fc":
            if not _blas_ready(a):
                a = np.ascontiguousarray(a)
            if not _blas_ready(b):
                b = np.ascontiguousarray(b)
        return np.matmul(a, b)

    def matmul_bool(self, a: Any, b: Any) -> Any:
        # Counting in float32 is exact below 2**24 terms and uses BLAS.
        count = np.float32 if a.shape[-1] < 2**24 else np.float64
        return self.matmul(a.astype(count), b.astype(count)) != 0

    def concat(self, parts: Any, axis: int) -> Any:
        return np.concatenate(list(parts), axis=axis)


_OPS = NumpyOps()


def _no_casts(a: EinsumArgs) -> bool:
    return all(x.dtype == a.dtype for x in a.operands)


def copy_if_view(a: EinsumArgs) -> bool:
    """Whether a result may be a view of an operand (one operand, nothing summed: a
    transpose or a diagonal), which the plans then copy: no result aliases an input."""
    ins = a.lowering.equation.inputs
    if len(ins) != 1:
        return False
    return set(a.lowering.equation.output) == set(ins[0])


def _cast(a: EinsumArgs) -> Callable[..., Any]:
    """The operands in the result dtype (numpy's rule)."""
    dtype = a.dtype
    return lambda *ops: cast(ops, dtype, _OPS)


def _lowering_plan(a: EinsumArgs) -> Callable[..., Any]:
    """The lowering with its plan written out as straight-line code (from the second
    call of the signature; the first interprets it)."""
    plan, plan_for, cast_ops = a.plan, a.plan_for, _cast(a)
    copy = copy_if_view(a)

    def lowered(*operands: Any) -> Any:
        r = run(plan, operands, _OPS, plan_for)
        return r[()] if r.ndim == 0 else r

    dtype = a.dtype
    if a.lowering.slices or dtype.kind == "O":
        body: Callable[..., Any] = lowered
    else:
        body = runner(lambda: _PROGRAMS.get(plan, dtype, _OPS, (), dtype.kind in "fc"), lowered)
    if copy:
        return lambda *ops: np.array(body(*cast_ops(*ops)))
    if _no_casts(a):
        return body
    return lambda *ops: body(*cast_ops(*ops))


# GEMMs of floating and complex operands that need no layout check spelled directly
# (numpy.dot: BLAS's dot and gemv); the others through NumpyOps.matmul, which makes the
# operands BLAS-ready.
SPELLING = Spelling(
    module=np,
    permute="{a}.transpose({perm!r})",
    swap="{a}.swapaxes(-1, -2)",
    sum="xp.add.reduce({a}, axis={axes!r}, dtype=_dtype)",
    dot="xp.dot({a}, {b})",
    mv="xp.dot({a}, {b})",
    vm="xp.dot({a}, {b})",
    mm=None,
    bmm=None,
    batched=None,
    outer="xp.multiply.outer({a}, {b})",
    ops_calls=1.5,  # NumpyOps primitives: a layout check or a view, then the call
    view_calls=0.25,  # a NumPy view costs a fraction of a computing call
    scalar_result=True,
)
_PROGRAMS = Programs(SPELLING)


def _loop_plan(a: EinsumArgs) -> Callable[..., Any]:
    """numpy.einsum's C loop with its subscripts and loop order fixed."""
    subscripts, cast_ops = a.subscripts, _cast(a)
    order = loop_order(subscripts, list(cast(a.operands, a.dtype, _OPS)))
    # A partial runs in C: no Python frame between the call and the loop.
    kwargs = {} if order == "K" else {"order": order}
    loop = functools.partial(c_einsum, subscripts, **kwargs)
    if copy_if_view(a):
        return lambda *ops: np.array(loop(*cast_ops(*ops)))
    if _no_casts(a):
        return loop
    return lambda *ops: loop(*cast_ops(*ops))


def numpy_einsum(a: EinsumArgs) -> Any:
    """numpy.einsum itself (with its own optimize=True), for comparison."""
    r = np.einsum(a.subscripts, *cast(a.operands, a.dtype, _OPS), optimize=True)
    return np.array(r) if copy_if_view(a) else r


# When numpy.einsum's single C loop (no optimize) beats the lowering:
# - for one or two operands whose plan has no GEMM, only reductions of products
#   (multiply-and-sum, diagonals, sums): the loop reads each operand once and makes no
#   temporary, where the lowering writes the product and reads it back (tall-skinny
#   ``nc,nc->n``, 10^6 x 2: 4.6 ms against 22 ms on a 2-core AMD EPYC);
# - for any number of operands, on inputs so small that the loop's products cost less
#   than the lowering's Python: a call costs what about ``einsum_loop_flops`` counted
#   products do (more with more operands: the loop steps one iterator per operand at
#   every point), so the products are weighted by the n - 1 pairwise steps. The
#   lowering runs about INSTRUCTIONS_PER_STEP calls per pairwise step (lay out each
#   operand, multiply, shape the result), one to finish and about LOWERING_SETUP
#   calls' worth to set the program up and cast the operands. The estimate needs only
#   the label sizes, so the loop is chosen without building the plan.
# - for an outer product of two operands (a multiply whose M and N both exceed 1): NumPy's
#   loop writes it in one pass, faster than the ufunc's broadcast multiply (``i,j->ij``
#   float32, 256^2: 20-28 us against 29-47 us; 2048^2: 1.8 ms against 2.1 ms, on a 2-core
#   AMD EPYC). A multiply of equal shapes (Hadamard) is the ufunc's own best case.
# - a matrix-vector product (a matmul step whose M or N is 1) stays with BLAS's gemv:
#   on an idle machine its threads read the matrix faster than the loop's single one.
LOOP_KINDS = frozenset({"multiply-and-sum", "diagonal", "sum"})
INSTRUCTIONS_PER_STEP = 4  # the lowering's shape: layouts, the product, the result
LOWERING_SETUP = 2


def _loop_step(step: Step, outer_products: bool) -> bool:
    if step.kind in LOOP_KINDS:
        return True
    return outer_products and step.kind == "multiply" and step.m > 1 and step.n > 1


def tiny(a: EinsumArgs) -> bool:
    """True when the loop's products cost less than the lowering's Python (see above)."""
    low = a.lowering
    steps = max(low.n_operands - 1, 1)
    instructions = INSTRUCTIONS_PER_STEP * steps + 1 + LOWERING_SETUP
    return low.naive_flops * steps <= NUMPY["einsum_loop_flops"] * instructions


def loop_wins(a: EinsumArgs, *, outer_products: bool = True) -> str | None:
    """None when numpy.einsum's loop is cheaper than the lowering, else why not
    (`outer_products`: whether it wins on those too, as against NumPy's multiply)."""
    reason = _native_applies(a)
    if reason is not None:
        return reason
    if tiny(a):
        return None
    low = a.lowering
    if low.n_operands > 2:
        return "three or more operands and many products: the contraction order wins"
    if all(_loop_step(step, outer_products) for step in low.plan.steps):
        return None
    return "the plan has a GEMM or a broadcast product: the lowering wins"


def loop_order(subscripts: str, operands: list[np.ndarray]) -> Literal["K", "F"]:
    """``"F"`` for batched dot products of short C-contiguous rows (``ab,ab->a`` with
    rows of at most ``column_bytes``): one pass per column beats a loop call per row
    (see :mod:`portops._backends.numpy.vecdot`); ``"K"`` otherwise."""
    ins, _, out = subscripts.partition("->")
    terms = ins.split(",")
    if len(terms) != 2 or terms[0] != terms[1] or len(terms[0]) != 2 or out != terms[0][0]:
        return "K"
    x, y = operands
    if x.shape != y.shape or x.shape[1] * x.itemsize > NUMPY["column_bytes"]:
        return "K"
    return "F" if x.flags.c_contiguous and y.flags.c_contiguous else "K"


def _native_applies(a: EinsumArgs) -> str | None:
    if a.lowering.slices:
        return "memory_limit needs chunking, which numpy.einsum does not do"
    if not a.subscripts.isascii():
        return "more labels than numpy.einsum's 52 letters"
    if getattr(a.dtype, "kind", None) == "O":
        return "object operands: numpy.einsum itself"
    return None


def choose(a: EinsumArgs) -> tuple[str, str]:
    """(strategy, rule) of a NumPy einsum call."""
    if a.dtype.kind == "O":
        return "loop", "object operands: numpy.einsum's loop (no BLAS for Python objects)"
    reason = loop_wins(a)
    if reason is None:
        if tiny(a):
            return "loop", "tiny operands: the loop's products cost less than the lowering's calls"
        return "loop", "no GEMM in the plan: the loop reads each operand once, no temporary"
    return "lowering", reason


STRATEGIES = Strategies(
    [
        Strategy(
            "lowering",
            "each pairwise step one batched matmul, BLAS-ready layouts, straight-line code",
            _lowering_plan,
        ),
        Strategy(
            "loop",
            "numpy.einsum's C loop: no temporaries, no GEMM",
            _loop_plan,
            applies=_native_applies,
        ),
    ],
    choose=choose,
)

extend.register(
    "einsum",
    "numpy",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="batched-matmul lowering (BLAS) or numpy.einsum's C loop, whichever wins",
    strategies=STRATEGIES,
)
extend.register(
    "einsum", "numpy_einsum", libraries=["numpy"], priority=Priority.NATIVE, applies=_native_applies
)(numpy_einsum)
