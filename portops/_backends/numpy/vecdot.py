"""vecdot on NumPy: ``np.vecdot``, ``einsum`` or a matrix product, whichever is cheapest.

Neither ``np.vecdot`` nor ``einsum`` makes a product temporary; which one wins depends
on how many vectors there are, how long and how strided they are (see ``_kernel``).
The torch CPU specialisation calls :func:`vecdot_numpy` on zero-copy views.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from ... import extend
from ..._caches import l2_bytes, llc_bytes
from ..._ops.vecdot import VecdotArgs
from ..._threads import available_cores
from ...extend import Priority
from .c_loops import c_einsum

# Which kernel wins, from a cost model of NumPy's loops (float32, 2-core Intel Xeon:
# np.vecdot costs about 0.8 us plus 7 ns per vector, einsum's C loop about 1 us plus a
# faster per-vector step, and either runs at memory speed once vectors are long;
# numpy.einsum's Python wrapper would add 0.9 us, so the C loop is called directly):
# - np.vecdot calls its inner loop once per vector: cheapest for few vectors, and for
#   long unit-stride ones; 70x slower than einsum along a strided axis (4096x4096,
#   axis 0: 213 ms vs 3.2 ms) and 2-3x slower for short ones, unless they are very
#   few (FEW_STRIDED vectors of at most STRIDED_SHORT elements).
# - einsum iterates over the whole broadcast shape; for vectors of at most
#   F_ORDER_BYTES in memory order its per-vector loop is the bottleneck, and Fortran
#   order (one pass per column over all vectors) is 3-5x faster (10^6 x 2: 1.6 ms vs
#   8.6 ms; AMD EPYC, 65536x2 float64: 80 us vs 321, 65536x4 float32: 132 vs 295).
#   Once the inputs fill half the LLC (SPILL_BYTES) those passes come from memory, and
#   only two of them still win (10^6 x 4 float32: 4.97 ms vs 4.67).
# - a single vector against many: one matrix-vector product (BLAS), at every size.
#   The fused loops call their inner loop once per vector (np.vecdot: 65536x16, 1.1 ms
#   against 84 us) and BLAS's threaded GEMV reads the matrix faster than one core past
#   the caches (4096x1024: 0.34 ms against 0.68 ms). ndarray.dot reaches it at a
#   third of np.matmul's fixed cost (0.3 us against 0.9 us) and serves matrices up to
#   DOT_BYTES; past that np.matmul, faster on short rows, which BLAS splits over its
#   threads (they stall while another process holds a core: NumPy's own calls too).
FEW_VECTORS = 32
SHORT = 32
SHORT_BYTES = 8
F_ORDER_BYTES = 16
SPILL_BYTES = llc_bytes() // 2
CACHE_BYTES = l2_bytes() * available_cores()
DOT_BYTES = max(1 << 15, l2_bytes() // 8)  # well below the size BLAS threads from
FEW_STRIDED = 16
STRIDED_SHORT = 128
_EQUATION = "...i,...i->..."


def _unit(x: np.ndarray, axis: int) -> bool:
    return x.shape[axis] <= 1 or x.strides[axis] == x.itemsize


def _kernel(x1: np.ndarray, x2: np.ndarray, axis: int) -> str:
    """``"vecdot"``, ``"einsum"`` or ``"einsum_f"`` for equal-shape inputs (see above)."""
    n = x1.shape[axis]
    unit = _unit(x1, axis) and _unit(x2, axis)
    # np.vecdot's per-vector loop is cheaper for double precision (1.2 us against 1.4 us
    # for einsum at 64x16 float64; 1.8 against 1.3 us as float32).
    few = FEW_VECTORS if x1.itemsize <= 4 else 4 * FEW_VECTORS
    if x1.size <= n or (unit and x1.size <= few * max(n, 1)):
        return "vecdot"
    if not unit:  # np.vecdot's inner loop on strided vectors is slow past a few
        return "vecdot" if x1.size <= FEW_STRIDED * n and n <= STRIDED_SHORT else "einsum"
    if n >= SHORT:
        return "vecdot"
    if n * x1.itemsize <= F_ORDER_BYTES and x1.ndim == 2 and axis in (-1, 1):
        if n <= 2 or x1.nbytes + x2.nbytes < SPILL_BYTES:
            return "einsum_f"
    return "einsum"


def _matvec(x1: np.ndarray, x2: np.ndarray, axis: int) -> np.ndarray | None:
    """``conj(x1) . x2`` as one matrix-vector product when one input is a single vector.

    Only for single and double precision (NumPy's float16 matmul sums in float16).
    """
    if x1.dtype.char not in "fdFD" or x2.dtype.char not in "fdFD" or x1.dtype != x2.dtype:
        return None
    n = x1.shape[axis]
    if n < 2 or min(x1.ndim, x2.ndim) < -axis:
        return None
    if x2.size == n and x1.size > n:
        many, one, conj_result = x1, x2, x1.dtype.kind == "c"  # conj(x1 . conj(x2))
    elif x1.size == n and x2.size > n:
        many, one, conj_result = x2, np.conj(x1) if x1.dtype.kind == "c" else x1, False
    else:
        return None
    if many.nbytes >= CACHE_BYTES:  # memory-bound: the fused loops, which never stall
        return None
    if axis != -1:
        many = np.moveaxis(many, axis, -1)
    one = one.reshape(n)
    if conj_result:
        one = np.conj(one)
    r = np.matmul(many, one)
    if conj_result:
        r = np.conj(r)
    shape = np.broadcast_shapes(x1.shape, x2.shape)
    out = shape[:axis] + shape[axis + 1 :] if axis != -1 else shape[:-1]
    result: np.ndarray = r.reshape(out)
    return result


def _einsum(x1: np.ndarray, x2: np.ndarray, axis: int, order: Literal["K", "F"] = "K") -> Any:
    if x1.dtype.kind == "c":
        x1 = np.conj(x1)
    if axis != -1:
        x1 = np.moveaxis(x1, axis, -1)
        x2 = np.moveaxis(x2, axis, -1)
    dtype = np.result_type(x1, x2)
    if dtype == np.float16:
        # einsum would accumulate into a float16 output; sum in float32 instead.
        r = c_einsum(_EQUATION, x1, x2, dtype=np.float32, order=order)
        return np.asarray(r).astype(np.float16)
    return c_einsum(_EQUATION, x1, x2, order=order)


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


def _gemm(x1: np.ndarray, x2: np.ndarray, axis: int) -> np.ndarray | None:
    """Outer-product broadcasting as one batched GEMM ``conj(x1) @ x2.T``, or None.

    Only for single and double precision: NumPy's float16 matmul sums in float16.
    """
    if x1.dtype.char not in "fdFD" or x2.dtype.char not in "fdFD" or x1.shape[axis] < 2:
        return None
    ndim = max(x1.ndim, x2.ndim)
    x1 = np.moveaxis(x1.reshape((1,) * (ndim - x1.ndim) + x1.shape), axis, -1)
    x2 = np.moveaxis(x2.reshape((1,) * (ndim - x2.ndim) + x2.shape), axis, -1)
    dims = _outer_dims(x1.shape, x2.shape)
    if dims is None:
        return None
    both, only1, only2 = dims
    rest = [i for i in range(ndim - 1) if i not in both + only1 + only2]
    k = x1.shape[-1]
    nb = math.prod(x1.shape[i] for i in both)
    a = x1.transpose(both + only1 + only2 + rest + [ndim - 1]).reshape(nb, -1, k)
    b = x2.transpose(both + only2 + only1 + rest + [ndim - 1]).reshape(nb, -1, k)
    if a.dtype.kind == "c":
        a = a.conj()
    r = np.matmul(a, b.transpose(0, 2, 1))
    # (both, only1, only2) back to the broadcast order, with the length-1 dims.
    r = r.reshape([x1.shape[i] for i in both + only1] + [x2.shape[i] for i in only2])
    r = r.reshape(r.shape + (1,) * len(rest))
    return np.transpose(r, np.argsort(both + only1 + only2 + rest))


def vecdot_numpy(x1: np.ndarray, x2: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
    """vecdot of NumPy arrays with a negative, validated `axis`; always an ndarray.

    ``np.vecdot`` already multiplies and sums float16 in float32.
    """
    r = None
    if x1.shape != x2.shape:
        r = _matvec(x1, x2, axis)
        if r is None and min(x1.size, x2.size) > x1.shape[axis]:  # else not an outer product
            r = _gemm(x1, x2, axis)
    if r is None:
        kernel = _kernel(x1, x2, axis)
        if kernel == "vecdot":
            # Without the axis keyword the gufunc call is cheaper (small arrays).
            r = np.vecdot(x1, x2) if axis == -1 else np.vecdot(x1, x2, axis=axis)  # type: ignore[call-overload]
        else:
            r = _einsum(x1, x2, axis, "F" if kernel == "einsum_f" else "K")
    if keepdims:
        r = np.expand_dims(r, axis)
    return r if type(r) is np.ndarray else np.asarray(r)


def _numpy(a: VecdotArgs) -> np.ndarray:
    """np.vecdot for long unit-stride vectors, einsum otherwise (no product temporary)."""
    return vecdot_numpy(a.x1, a.x2, a.axis, a.keepdims)


def _as_array(f: Any) -> Any:
    """`f`, its scalar result (inputs of one dimension) wrapped as a 0-d array."""

    def wrapped(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        return np.asarray(f(x1, x2))

    return wrapped


def _direct(x1: np.ndarray, x2: np.ndarray) -> Any:
    """A plan that is one NumPy call, for the common calls: same dtype (single or double
    precision), last axis, no keepdims, and equal shapes or one single vector."""
    if x1.dtype != x2.dtype or x1.dtype.char not in "fdFD":
        return None
    if x1.shape == x2.shape:
        kernel = _kernel(x1, x2, -1)
        if kernel == "vecdot":
            return np.vecdot
        if x1.dtype.kind == "c":
            return None  # einsum needs conj(x1)
        if kernel == "einsum_f":
            return lambda x1, x2: c_einsum(_EQUATION, x1, x2, order="F")
        return lambda x1, x2: c_einsum(_EQUATION, x1, x2)
    # One single vector: a matrix-vector product (real dtypes: conj(x1) = x1).
    if x1.dtype.kind == "c" or x1.ndim + x2.ndim != 3:
        return None
    many, one = (x1, x2) if x1.ndim == 2 else (x2, x1)
    n = one.shape[0]
    if n < 2 or many.shape[1] != n:
        return None
    if many.flags.c_contiguous and many.nbytes > DOT_BYTES:
        return np.matmul if many is x1 else _matmul_swapped
    if many.flags.c_contiguous or many.flags.f_contiguous:
        # ndarray.dot reaches the same GEMV as np.matmul at a third of its fixed cost
        # (0.3 us against 0.9 us); on other strides it would copy the matrix first.
        return _dot if many is x1 else _dot_swapped
    return np.matmul if many is x1 else _matmul_swapped


_dot = np.ndarray.dot


def _matmul_swapped(x1: np.ndarray, x2: np.ndarray) -> Any:
    return np.matmul(x2, x1)


def _dot_swapped(x1: np.ndarray, x2: np.ndarray) -> Any:
    return x2.dot(x1)


def plan(a: VecdotArgs) -> Any:
    """Plan of a call (see portops._plans): the kernel its signature leads to, fixed."""
    x1, x2, axis, keepdims = a.x1, a.x2, a.axis, a.keepdims
    if type(x1) is not np.ndarray or type(x2) is not np.ndarray:
        return None
    if axis == -1 and not keepdims:
        direct = _direct(x1, x2)
        if direct is not None:
            return _as_array(direct) if max(x1.ndim, x2.ndim) == 1 else direct
    return lambda x1, x2: vecdot_numpy(x1, x2, axis, keepdims)


extend.register(
    "vecdot",
    "numpy",
    libraries=("numpy",),
    devices=("cpu",),
    priority=Priority.SPECIALIZED,
    planner=plan,
)(_numpy)
