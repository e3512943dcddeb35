"""NumPy einsum, two strategies: ``lowering``, the batched-matmul lowering with NumPy's
functions, every matrix handed to ``matmul`` one BLAS can read; and ``loop``,
``numpy.einsum``'s own C loop, where no GEMM is to be had or the operands are tiny."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from ... import extend
from ..._einsum.execute import ArrayAPIOps, cast, run, with_casts
from ..._einsum.program import Programs, Spelling, runner
from ..._ops.einsum import EinsumArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority

__all__ = ["c_einsum", "loop_order", "loop_wins", "tiny"]

try:  # NumPy's C loop itself: numpy.einsum checks its keywords first (about 0.9 µs a call)
    from numpy._core.multiarray import c_einsum
except ImportError:  # pragma: no cover - a NumPy that moved it
    c_einsum = np.einsum


def _blas_ready(x: np.ndarray) -> bool:
    """Whether one of the last two axes has unit stride (else NumPy's matmul loops)."""
    if x.ndim < 2:
        return True
    m, n = x.shape[-2:]
    s_m, s_n = x.strides[-2:]
    item = x.itemsize
    return (s_n == item and s_m >= n * item) or (s_m == item and s_n >= m * item)


class NumpyOps(ArrayAPIOps):
    """Plan primitives as NumPy calls: GEMM operands made BLAS-ready."""

    def matmul(self, a: Any, b: Any) -> Any:
        if a.dtype.kind in "fc":
            a = a if _blas_ready(a) else np.ascontiguousarray(a)
            b = b if _blas_ready(b) else np.ascontiguousarray(b)
        return np.matmul(a, b)


_OPS = NumpyOps(np)


def _lowering_plan(a: EinsumArgs) -> Callable[..., Any]:
    """The lowering, written out as straight-line code from the signature's second call."""
    plan, plan_for, dtype = a.plan, a.lowering.plan_for, a.dtype

    def lowered(*operands: Any) -> Any:
        r = run(plan, operands, _OPS, plan_for)
        return r[()] if r.ndim == 0 else r

    body: Callable[..., Any] = lowered
    if not a.lowering.slices and dtype.kind != "O":
        body = runner(lambda: _PROGRAMS.get(plan, dtype, _OPS, (), dtype.kind in "fc"), lowered)
    return with_casts(a, _OPS, _fresh, body)


def _fresh(r: Any) -> Any:
    """A copy of a result that may view an operand; 0-d as a NumPy scalar (numpy.einsum's)."""
    if np.ndim(r):
        return np.array(r)
    return r[()] if isinstance(r, np.ndarray) else r  # (scalars and objects: as they are)


# Unbatched floating GEMMs spelled as numpy.dot: the same BLAS call as matmul, which
# costs about 0.5 us more per call (ufunc setup); batched ones via NumpyOps.matmul.
SPELLING = Spelling(
    module=np,
    permute="{a}.transpose({perm!r})",
    swap="{a}.swapaxes(-1, -2)",
    sum="xp.add.reduce({a}, axis={axes!r}, dtype=_dtype)",
    dot="xp.dot({a}, {b})",
    mv="xp.dot({a}, {b})",
    vm="xp.dot({a}, {b})",
    mm="xp.dot({a}, {b})",
    bmm=None,
    batched=None,
    outer="xp.multiply.outer({a}, {b})",
    ops_calls=1.5,  # NumpyOps primitives: a layout check or a view, then the call
    view_calls=0.25,  # a NumPy view costs a fraction of a computing call
    scalar_result=True,
)
_PROGRAMS = Programs(SPELLING)


def _loop_plan(a: EinsumArgs) -> Callable[..., Any]:
    """numpy.einsum's C loop, subscripts and loop order fixed (a partial: no frame)."""
    order = loop_order(a.subscripts, list(cast(a.operands, a.dtype, _OPS)))
    kwargs = {} if order == "K" else {"order": order}
    return with_casts(a, _OPS, _fresh, functools.partial(c_einsum, a.subscripts, **kwargs))


def numpy_einsum(a: EinsumArgs) -> Any:
    """numpy.einsum itself (with its own optimize=True), for comparison."""
    r = np.einsum(a.subscripts, *cast(a.operands, a.dtype, _OPS), optimize=True)
    return _fresh(r) if a.may_alias else r


# numpy.einsum's C loop beats the lowering for GEMM-free plans of one or two operands,
# tiny inputs and outer products (one pass, no temporary); gemv stays with BLAS.
LOOP_KINDS = frozenset({"multiply-and-sum", "diagonal", "sum"})


def tiny(a: EinsumArgs) -> bool:
    """True when the loop's products over every label cost no more than one library
    call (``einsum_loop_flops``); the lowering makes several."""
    return bool(a.lowering.naive_flops <= NUMPY["einsum_loop_flops"] * a.lowering.n_operands)


def loop_wins(a: EinsumArgs, *, outer_products: bool = True) -> str | None:
    """None when numpy.einsum's loop is cheaper than the lowering, else why not
    (`outer_products`: whether it wins on those too, as against NumPy's multiply)."""
    reason = native_applies(a)
    if reason is not None or tiny(a):
        return reason
    if a.lowering.n_operands > 2:
        return "three or more operands and many products: the contraction order wins"
    for step in a.plan.steps:
        outer = outer_products and step.kind == "multiply" and step.m > 1 and step.n > 1
        if step.kind not in LOOP_KINDS and not outer:
            return "the plan has a GEMM or a broadcast product: the lowering wins"
    return None


def loop_order(subscripts: str, operands: list[np.ndarray]) -> Literal["K", "F"]:
    """``"F"`` for batched dot products of short rows (one pass per column), else ``"K"``."""
    ins, _, out = subscripts.partition("->")
    terms = ins.split(",")
    if len(terms) != 2 or terms[0] != terms[1] or len(terms[0]) != 2 or out != terms[0][0]:
        return "K"
    x, y = operands
    if x.shape != y.shape or x.shape[1] * x.itemsize > NUMPY["column_bytes"]:
        return "K"
    return "F" if x.flags.c_contiguous and y.flags.c_contiguous else "K"


def native_applies(a: EinsumArgs) -> str | None:
    """None when numpy.einsum (and its loop) can run the call, else why not."""
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
    if reason is not None:
        return "lowering", reason
    if tiny(a):
        return "loop", "tiny operands: the loop's products cost less than the lowering's calls"
    return "loop", "no GEMM in the plan: the loop reads each operand once, no temporary"


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
            applies=native_applies,
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
    "einsum", "numpy_einsum", libraries=["numpy"], priority=Priority.NATIVE, applies=native_applies
)(numpy_einsum)
