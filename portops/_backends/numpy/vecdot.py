"""vecdot on NumPy without a product temporary: ``np.vecdot``, einsum's C loop or BLAS,
chosen by how many vectors there are, how long and how strided; the torch CPU
specialisation runs the same choice on zero-copy views (:func:`plan`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ... import _machine, _threads, extend
from ..._ops.vecdot import VecdotArgs
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority
from .einsum import c_einsum

__all__ = ["choose", "plan"]

_EQUATION = "...i,...i->..."
Run = Callable[[np.ndarray, np.ndarray], Any]


def _unit(x: np.ndarray, axis: int) -> bool:
    return x.shape[axis] <= 1 or x.strides[axis] == x.itemsize


def _aligned(x1: np.ndarray, x2: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Both inputs with the same number of dims and the contracted axis last."""
    ndim = max(x1.ndim, x2.ndim)
    return tuple(
        np.moveaxis(x.reshape((1,) * (ndim - x.ndim) + x.shape), axis, -1) for x in (x1, x2)
    )


def _outer_dims(s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[list[int], ...] | None:
    """Batch dims of aligned shapes as (both, x1 only, x2 only); None unless each input
    has a dimension of length > 1 that the other broadcasts (then one GEMM does it)."""
    pairs = list(enumerate(zip(s1[:-1], s2[:-1], strict=True)))
    both = [i for i, (a, b) in pairs if a > 1 and b > 1]
    only1 = [i for i, (a, b) in pairs if a > 1 >= b]
    only2 = [i for i, (a, b) in pairs if b > 1 >= a]
    return (both, only1, only2) if only1 and only2 else None


def applies(name: str, x1: np.ndarray, x2: np.ndarray, axis: int) -> str | None:
    """None when strategy `name` can compute vecdot of these operands, else why not."""
    if name not in ("matvec", "gemm"):
        return None
    n = x1.shape[axis]
    if x1.dtype != x2.dtype or x1.dtype.char not in "fdFD":  # NumPy's float16 matmul
        return "BLAS: single or double precision of one dtype"  # sums in float16
    if name == "matvec":
        one = n >= 2 and (x1.size == n) != (x2.size == n) and min(x1.ndim, x2.ndim) >= -axis
        return None if one else "not one vector against many"
    if n < 2 or _outer_dims(*(v.shape for v in _aligned(x1, x2, axis))) is None:
        return "no dimension of each input that the other broadcasts"
    return None


def choose(x1: np.ndarray, x2: np.ndarray, axis: int) -> tuple[str, str]:
    """(strategy, rule) for NumPy operands (or zero-copy views of tensors)."""
    if x1.shape != x2.shape:
        if applies("matvec", x1, x2, axis) is None:
            return "matvec", "one vector against many: BLAS's GEMV, on its threads"
        if applies("gemm", x1, x2, axis) is None:
            return "gemm", "each input broadcasts along a dimension of the other: one GEMM"
    n = x1.shape[axis]
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
            return "columns", f"rows of {NUMPY['column_bytes']} bytes or less: by column"
    return "einsum", f"short vectors (< {NUMPY['vecdot_short']}): einsum's loop, no restarts"


def _shaped(r: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`r` (an array or a NumPy scalar) as an ndarray of the call's result shape."""
    a = np.asarray(r)
    return a if a.shape == shape else a.reshape(shape)


def _plan_einsum(
    x1: np.ndarray, x2: np.ndarray, axis: int, shape: tuple[int, ...], order: str, plain: bool
) -> Run:
    conj = x1.dtype.kind == "c"
    dtype = np.result_type(x1, x2)
    # einsum would sum half precision in float16: sum in float32 (or wider) instead.
    acc = np.promote_types(dtype, np.float32) if np.float16 in (x1.dtype, x2.dtype) else None
    loop = functools.partial(c_einsum, _EQUATION, order=order, dtype=acc)
    if plain and not conj and acc is None:
        return loop  # a partial runs in C: no Python frame between the call and the loop

    def run(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        if conj:
            x1 = np.conj(x1)
        if axis != -1:
            x1, x2 = np.moveaxis(x1, axis, -1), np.moveaxis(x2, axis, -1)
        r = _shaped(loop(x1, x2), shape)
        return r if acc is None else r.astype(dtype)

    return run


def _plan_matvec(x1: np.ndarray, x2: np.ndarray, axis: int, shape: tuple[int, ...]) -> Run:
    """``conj(x1) . x2`` as one matrix-vector product (one input a single vector)."""
    n = x1.shape[axis]
    first_is_many = x2.size == n
    complex_ = x1.dtype.kind == "c"
    if not complex_ and x1.ndim + x2.ndim == 3 and len(shape) == 1:
        # ndarray.dot costs a third of np.matmul's fixed cost, which decides calls within L1
        # (C or Fortran order); beyond, np.matmul's GEMV is as fast or faster (rows of 2: 1.4x).
        many = x1 if first_is_many else x2
        layout = many.flags.c_contiguous or many.flags.f_contiguous
        small = many.nbytes <= _machine.current().l1
        dot = np.ndarray.dot if layout and small else np.matmul
        return dot if first_is_many else lambda x1, x2: dot(x2, x1)

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


def _plan_gemm(x1: np.ndarray, x2: np.ndarray, axis: int, shape: tuple[int, ...]) -> Run:
    """Outer-product broadcasting as one batched GEMM ``conj(x1) @ x2.T``."""
    a1, a2 = _aligned(x1, x2, axis)
    dims = _outer_dims(a1.shape, a2.shape)
    assert dims is not None  # the strategy applies
    both, only1, only2 = dims
    last = a1.ndim - 1
    rest = [i for i in range(last) if i not in both + only1 + only2]  # length 1 in both
    k, batch = a1.shape[-1], math.prod(a1.shape[i] for i in both)
    order1, order2 = both + only1 + only2 + rest + [last], both + only2 + only1 + rest + [last]
    mid = [a1.shape[i] for i in both + only1] + [a2.shape[i] for i in only2] + [1] * len(rest)
    back = np.argsort(both + only1 + only2 + rest)
    conj = x1.dtype.kind == "c"

    def run(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        x1, x2 = _aligned(x1, x2, axis)
        a = x1.transpose(order1).reshape(batch, -1, k)
        b = x2.transpose(order2).reshape(batch, -1, k)
        r = np.matmul(a.conj() if conj else a, b.transpose(0, 2, 1))
        return _shaped(r.reshape(mid).transpose(back), shape)

    return run


# NumPy's gufunc loops drop the GIL only past 500 vectors (its thresholded release);
# einsum's loop always does.
_GIL_FREE_VECTORS = 501
_THREADED_DTYPES = frozenset("fdbhilqBHILQ")  # (half precision and complex: one thread)


def _most_threads(x1: np.ndarray, x2: np.ndarray, axis: int, strategy: str) -> int:
    """Threads worth starting, whatever the limit, over blocks of the first axis: one per
    two ``thread_grain`` of input (vecdot only reads, at streaming speed: a grain's time
    is about twice its bytes; 65536x16 float32, 8 MiB, ran 1.2x slower on two threads,
    131072x16 1.2x faster), with enough vectors per block for np.vecdot to drop the GIL.
    1 for other strategies and dtypes, and where the first axis is not the outermost in
    memory (blocks would interleave: 2x slower)."""
    shape, grain = x1.shape, 2 * int(NUMPY["thread_grain"])
    if strategy not in ("vecdot", "einsum") or shape != x2.shape or x1.ndim < 2 or not x1.size:
        return 1
    if axis % x1.ndim == 0 or x1.dtype != x2.dtype or x1.dtype.char not in _THREADED_DTYPES:
        return 1
    if any(x.strides[0] < max(x.strides) for x in (x1, x2)):
        return 1
    nbytes = x1.nbytes + x2.nbytes
    n = nbytes // grain if nbytes >= 2 * grain else 1
    if strategy == "vecdot":
        n = min(n, x1.size // shape[axis] // _GIL_FREE_VECTORS)
    return max(1, min(int(n), int(shape[0])))


def threads(x1: np.ndarray, x2: np.ndarray, axis: int, strategy: str) -> int:
    """Threads strategy `strategy` uses on these operands now (see :func:`_most_threads`)."""
    most = _most_threads(x1, x2, axis, strategy)
    return most if most == 1 else min(most, _threads.effective_threads())


def _threaded(run: Run, strategy: str, a: VecdotArgs, x1: np.ndarray, x2: np.ndarray) -> Run:
    """`run`, or for operands large enough to thread, blocks of the first axis over
    :func:`threads` threads, each writing its block of one result."""
    axis = a.axis % x1.ndim
    most = _most_threads(x1, x2, axis, strategy)  # (a plan's key fixes what it reads)
    if most == 1:
        return run  # never threaded at this size: the bare call
    result_shape, dtype = x1.shape[:axis] + x1.shape[axis + 1 :], np.result_type(x1, x2)

    def kernel(u1: np.ndarray, u2: np.ndarray, out: np.ndarray) -> None:
        if strategy == "vecdot":
            np.vecdot(u1, u2, axis=axis, out=out)  # type: ignore[call-overload]
        else:
            c_einsum(_EQUATION, np.moveaxis(u1, axis, -1), np.moveaxis(u2, axis, -1), out=out)

    def threaded(x1: np.ndarray, x2: np.ndarray) -> Any:
        workers = min(most, _threads.effective_threads())
        if workers == 1:
            return run(x1, x2)
        out = np.empty(result_shape, dtype)
        edges = [x1.shape[0] * i // workers for i in range(workers + 1)]

        def work(blocks: Iterable[slice]) -> None:
            for block in blocks:
                kernel(x1[block], x2[block], out[block])

        _threads.run_units([slice(s, e) for s, e in itertools.pairwise(edges)], work, workers)
        return out.reshape(a.shape)

    return threaded


def plan(x1: np.ndarray, x2: np.ndarray, a: VecdotArgs, name: str = "") -> Run:
    """Strategy `name`'s plan (default: :func:`choose`'s) for NumPy operands of call `a`
    (or views of its tensors): a bare NumPy call where possible (tiny calls are mostly Python)."""
    axis, shape = a.axis, a.shape
    strategy = name or choose(x1, x2, axis)[0]
    plain = axis == -1 and not a.keepdims and len(shape) > 0  # NumPy's result as it is
    if strategy == "vecdot":

        def shaped(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
            return _shaped(np.vecdot(x1, x2, axis=axis), shape)  # type: ignore[call-overload]

        return _threaded(np.vecdot if plain else shaped, strategy, a, x1, x2)
    if strategy == "einsum":
        return _threaded(_plan_einsum(x1, x2, axis, shape, "K", plain), strategy, a, x1, x2)
    if strategy == "columns":
        return _plan_einsum(x1, x2, axis, shape, "F", plain)
    if strategy == "matvec":
        return _plan_matvec(x1, x2, axis, shape)
    if strategy == "gemm":
        return _plan_gemm(x1, x2, axis, shape)
    raise ValueError(f"no NumPy vecdot strategy {strategy!r}")


def _strategy(name: str, summary: str) -> Strategy:
    return Strategy(
        name,
        summary,
        lambda a: plan(a.x1, a.x2, a, name),
        threads=lambda a: threads(a.x1, a.x2, a.axis, name),
        applies=lambda a: applies(name, a.x1, a.x2, a.axis),
    )


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
