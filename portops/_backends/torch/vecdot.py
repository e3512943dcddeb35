"""vecdot on PyTorch tensors.

CPU: ``(a*b).sum(-1)`` and ``torch.linalg.vecdot`` write the whole product to memory
and read it back, and ``bmm`` runs one tiny GEMV per row; on a 2-core AMD EPYC at
4096x4096 float32 they take about 10 ms and 7 ms where NumPy's fused kernels read
each input once (2.5 ms). So CPU tensors are handed, without copying, to
:func:`~portops._backends.numpy.vecdot.vecdot_numpy`; half precision is converted to
float32 in cache-sized row blocks first. Short vectors (length < 64) go to torch's
own multithreaded product and sum only where enough threads make up for its moving
three times the bytes (NumPy's single-threaded fused loop wins on a few cores).
Short vectors along a strided axis (a transposed matrix) whose columns each pass a
core's L2 are summed column by column with torch's streaming elementwise kernels.
Plans of calls without gradients also use torch's own calls where they win, and give
long contiguous vectors past a core's L2 one BLAS dot each on torch's threads
(``row_dots.py``).

Gradients with respect to both inputs: an ``autograd.Function`` in eager mode and the
``portops::vecdot`` custom op (``torch.library``) under ``torch.compile``, both with the
same fast forward and a backward of two broadcast products, the least memory traffic
the gradients need. Below about a million elements the Function's fixed cost
outweighs the faster forward, so small inputs use torch's own differentiable
product and sum.

CUDA tensors: ``vecdot_cuda.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ... import extend
from ..._caches import l2_bytes, llc_bytes
from ..._ops.vecdot import VecdotArgs
from ...extend import Priority
from ..numpy import vecdot as numpy_vecdot
from ..numpy.vecdot import CACHE_BYTES, FEW_VECTORS, SHORT_BYTES, _kernel, vecdot_numpy
from .cpu_blas import mkl_off_intel
from .row_dots import row_dots_plan
from .views import ViewMemo, numpy_view

# Dtypes NumPy shares with torch; uint16/32/64 also lack torch CPU sum kernels.
_VIA_NUMPY = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.uint64,
    }
)
_NEEDS_NUMPY = frozenset({torch.uint16, torch.uint32, torch.uint64})
_HALF = frozenset({torch.float16, torch.bfloat16})
_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
_ACCUMULATE[torch.complex32] = torch.complex64
# torch's product and sum writes and rereads a product as large as the inputs: about
# three times NumPy's traffic, spread over torch's threads. It wins for large inputs of
# short vectors (where NumPy's loop is slowest) given at least this many threads.
SHORT = 64
MUL_SUM_MIN = 1 << 20
MUL_SUM_THREADS = 4
GRAD_SMALL = 1 << 20  # with gradients, native autograd wins below this many elements
BLOCK = 1 << 19  # elements per operand converted at a time (2 MB as float32)


def _mul_sum(
    x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool, dtype: torch.dtype
) -> torch.Tensor:
    acc = _ACCUMULATE.get(dtype, dtype)
    if x1.dtype is not acc:
        x1 = x1.to(acc)
    if x2.dtype is not acc:
        x2 = x2.to(acc)
    if acc.is_complex:
        x1 = x1.conj()
    return torch.sum(x1 * x2, dim=axis, keepdim=keepdims, dtype=acc).to(dtype)


def _half_blocks(
    x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool, dtype: torch.dtype
) -> torch.Tensor:
    """Convert row blocks to float32 (cache-resident), reduce each with NumPy."""
    ndim = max(x1.ndim, x2.ndim)
    shape = torch.broadcast_shapes(x1.shape, x2.shape)  # type: ignore[no-untyped-call]
    rows = shape[0]
    per_row = max(1, shape[1:].numel())
    step = max(1, BLOCK // per_row)
    # Split along the first dimension unless it is the contracted one or unsplittable.
    if ndim + axis == 0 or rows <= step:
        r = vecdot_numpy(numpy_view(x1.float()), numpy_view(x2.float()), axis, keepdims)
        return torch.from_numpy(r).to(dtype)
    split1 = x1.ndim == ndim and x1.shape[0] > 1
    split2 = x2.ndim == ndim and x2.shape[0] > 1
    whole1 = None if split1 else numpy_view(x1.float())
    whole2 = None if split2 else numpy_view(x2.float())
    parts = []
    for i in range(0, rows, step):
        b1 = numpy_view(x1[i : i + step].float()) if whole1 is None else whole1
        b2 = numpy_view(x2[i : i + step].float()) if whole2 is None else whole2
        parts.append(vecdot_numpy(b1, b2, axis, keepdims))
    return torch.from_numpy(np.concatenate(parts)).to(dtype)


def _mul_sum_wins(x1: torch.Tensor, x2: torch.Tensor, axis: int) -> bool:
    """Whether torch's multithreaded product and sum beats NumPy's kernels here."""
    if x1.shape[axis] >= SHORT or max(x1.numel(), x2.numel()) < MUL_SUM_MIN:
        return False
    return torch.get_num_threads() >= MUL_SUM_THREADS


def forward_cpu(x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
    """vecdot of CPU tensors without autograd (the body of the custom op)."""
    d1, d2 = x1.dtype, x2.dtype
    if axis == -1 and d1 is d2 and x1.shape == x2.shape:
        row_dots = row_dots_plan(x1, x2, keepdims)  # a few microseconds: large inputs
        if row_dots is not None:
            out: torch.Tensor = row_dots(x1, x2)
            return out
    numpy_wins = not _mul_sum_wins(x1, x2, axis)
    if d1 is d2 and d1 in _VIA_NUMPY and numpy_wins:  # the common case first
        return torch.from_numpy(vecdot_numpy(numpy_view(x1), numpy_view(x2), axis, keepdims))
    dtype = d1 if d1 is d2 else torch.promote_types(d1, d2)
    if dtype in _HALF and numpy_wins:
        return _half_blocks(x1, x2, axis, keepdims, dtype)
    if dtype not in _VIA_NUMPY or not (numpy_wins or dtype in _NEEDS_NUMPY):
        return _mul_sum(x1, x2, axis, keepdims, dtype)
    if d1 is not dtype:
        x1 = x1.to(dtype)
    if d2 is not dtype:
        x2 = x2.to(dtype)
    return torch.from_numpy(vecdot_numpy(numpy_view(x1), numpy_view(x2), axis, keepdims))


@torch.library.custom_op("portops::vecdot", mutates_args=(), device_types="cpu")
def _vecdot_op(x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
    return forward_cpu(x1, x2, axis, keepdims)


@_vecdot_op.register_fake
def _vecdot_fake(x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
    shape = list(torch.broadcast_shapes(x1.shape, x2.shape))  # type: ignore[no-untyped-call]
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    return x1.new_empty(shape, dtype=torch.promote_types(x1.dtype, x2.dtype))


def _reduce_to(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Sum a gradient over the dimensions `x` was broadcast along; match its dtype."""
    if g.shape != x.shape:
        g = g.sum_to_size(x.shape)
    if g.is_complex() and not x.is_complex():
        g = g.real
    return g.to(x.dtype)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x1, x2, axis, keepdims = inputs
    ctx.save_for_backward(x1, x2)
    ctx.axis, ctx.keepdims = axis, keepdims


def _gradients(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    # y = sum(conj(x1) * x2): dL/dx1 = x2 * conj(g), dL/dx2 = x1 * g (torch's convention).
    x1, x2 = ctx.saved_tensors
    g = grad if ctx.keepdims else grad.unsqueeze(ctx.axis)
    g1 = g2 = None
    if ctx.needs_input_grad[0]:
        g1 = _reduce_to(x2 * (g.conj() if g.is_complex() else g), x1)
    if ctx.needs_input_grad[1]:
        g2 = _reduce_to(x1 * g, x2)
    return g1, g2


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    return (*_gradients(ctx, grad), None, None)


_vecdot_op.register_autograd(_backward, setup_context=_setup_context)


class _Vecdot(torch.autograd.Function):
    """The same forward and backward as the custom op, with less overhead in eager mode."""

    @staticmethod
    def forward(x1: torch.Tensor, x2: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
        return forward_cpu(x1, x2, axis, keepdims)

    setup_context = staticmethod(_setup_context)
    backward = staticmethod(_backward)


def _native_autograd_wins(x1: torch.Tensor, x2: torch.Tensor) -> bool:
    """Whether torch's own differentiable product and sum beats the autograd Function
    here: below GRAD_SMALL elements, where the Function's fixed cost outweighs its
    faster forward."""
    return x1.numel() < GRAD_SMALL and x2.numel() < GRAD_SMALL


def _torch_cpu(a: VecdotArgs) -> torch.Tensor:
    """NumPy's fused kernels on zero-copy views; custom op for autograd and compile."""
    x1, x2 = a.x1, a.x2
    if torch.compiler.is_compiling():
        out: torch.Tensor = torch.ops.portops.vecdot(x1, x2, a.axis, a.keepdims)
        return out
    if (x1.requires_grad or x2.requires_grad) and torch.is_grad_enabled():
        if _native_autograd_wins(x1, x2):
            dtype = x1.dtype if x1.dtype is x2.dtype else torch.promote_types(x1.dtype, x2.dtype)
            return _mul_sum(x1, x2, a.axis, a.keepdims, dtype)
        grad: torch.Tensor = _Vecdot.apply(x1, x2, a.axis, a.keepdims)  # type: ignore[no-untyped-call]
        return grad
    return forward_cpu(x1, x2, a.axis, a.keepdims)


# Below this many elements per input (and for these dtypes, whose result dtype torch's
# vecdot keeps) torch.linalg.vecdot is the cheapest call.
NATIVE_SMALL = 1 << 10
_NATIVE_SMALL = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})
_REAL = frozenset({torch.float32, torch.float64})
# A single vector against a matrix: torch.matmul (a multithreaded GEMV) wins, but for
# vectors this short its GEMV loop is slower than NumPy's, once the matrix leaves the
# caches (LLC_BYTES: all of them, the L3 included; 2-core AMD EPYC, 32 MiB L3,
# 10^6x2 (8 MB): torch.mv 0.77-0.82 ms against NumPy's 1.0-1.06 ms).
MATVEC_SHORT = 8
LLC_BYTES = llc_bytes()
# Rows from which np.vecdot's per-row loop beats a slow torch GEMV (mkl_off_intel).
MATVEC_LONG = 128
# Equal shapes in the caches (see _equal_shapes): from these many elements NumPy's fused
# loops on views repay the views' cost (about 1.5 us); torch's own product and sum
# runs on one thread below 32768 elements (its grain size).
NUMPY_MIN = 1 << 13
STRIDED_NUMPY_MIN = 1 << 15
L2_BYTES = l2_bytes()
LINE_BYTES = 64  # a cache line
# Vectors along a strided axis whose other axes are contiguous (a transposed matrix)
# are summed one column at a time (see _columns) for up to this many columns.
COLUMNS_MAX = 32


def _native(axis: int, keepdims: bool) -> Any:
    """``torch.linalg.vecdot`` as a plan (no keyword for the last axis: cheaper)."""
    if axis == -1 and not keepdims:
        return torch.linalg.vecdot

    def native(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        r = torch.linalg.vecdot(x1, x2, dim=axis)
        res: torch.Tensor = r.unsqueeze(axis) if keepdims else r
        return res

    return native


def _matvec(x1: torch.Tensor, x2: torch.Tensor) -> Any:
    """A plan when one input is a single vector along the last axis (real dtypes:
    conj(x1) = x1) and the other a matrix or stack of them; else None.

    ``torch.matmul``; for a matrix ``torch.mv``, the same GEMV at less fixed cost
    (1.2 us against 1.4); ``np.vecdot`` on views for rows of at least MATVEC_LONG in
    a matrix of at least a core's L2 (smaller ones do not repay the views and the
    per-row calls) where torch's BLAS is MKL on another vendor's CPU
    (:func:`~portops._backends.torch.cpu_blas.mkl_off_intel`; 4096x1024 0.49-0.66 ms
    against 0.67-0.89 ms for ``torch.mv``). Not NumPy's GEMV on views, faster still
    alone: OpenBLAS's threads spin on after each call and starve torch's (a torch
    reduction after it, 256x1024: 211 us against 53; 256x4096: 285 us against 133).
    """
    if x1.ndim == x2.ndim or min(x1.ndim, x2.ndim) != 1:
        return None
    many, one = (x1, x2) if x2.ndim == 1 else (x2, x1)
    n = one.shape[0]
    if n < 2 or many.shape[-1] != n:
        return None
    nbytes = many.numel() * many.element_size()
    long_rows = n >= MATVEC_LONG and many.stride(-1) == 1
    if long_rows and nbytes >= L2_BYTES and mkl_off_intel():
        views = ViewMemo().views

        def numpy_vecdot_plan(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.vecdot(*views(x1, x2)))

        return numpy_vecdot_plan
    if n < MATVEC_SHORT and nbytes >= LLC_BYTES:
        return None
    if many.ndim == 2:
        return torch.mv if many is x1 else lambda x1, x2: torch.mv(x2, x1)
    return torch.matmul if many is x1 else lambda x1, x2: torch.matmul(x2, x1)


def _columns_win(x1: torch.Tensor, x2: torch.Tensor, axis: int) -> bool:
    """Whether :func:`_columns` beats a reduction here: real vectors of at most
    COLUMNS_MAX elements along an axis whose slices (the columns) are contiguous and at
    least a core's L2 each.

    torch reduces a strided axis with a slow kernel, while its elementwise kernels
    stream: on a 2-core AMD EPYC, 10^6x2 transposed took 0.31 ms against 0.78 ms for
    ``torch.linalg.vecdot`` and 0.72 ms for NumPy's einsum on views; 262144x32, 2.2 ms
    against 12.7 and 2.9. Each column's pass has a fixed cost (a few microseconds)
    that columns past the L2 repay; smaller ones lose to NumPy's single pass
    (32768x8: 72 us against 56).
    """
    n = x1.shape[axis]
    if n > COLUMNS_MAX or x1.dtype not in _REAL:
        return False
    c1, c2 = x1.select(axis, 0), x2.select(axis, 0)
    column_bytes = c1.numel() * c1.element_size()
    return column_bytes >= L2_BYTES and c1.is_contiguous() and c2.is_contiguous()


def _columns(axis: int, keepdims: bool) -> Any:
    """A plan summing the products one column at a time into the result, each pass
    a streaming elementwise kernel on torch's threads (see :func:`_columns_win`)."""

    def columns(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        cols1, cols2 = x1.unbind(axis), x2.unbind(axis)
        out = torch.mul(cols1[0], cols2[0])
        for c1, c2 in zip(cols1[1:], cols2[1:], strict=True):
            out.addcmul_(c1, c2)
        return out.unsqueeze(axis) if keepdims else out

    return columns


def _equal_shapes(x1: torch.Tensor, x2: torch.Tensor, axis: int) -> str:
    """How to reduce two tensors of one shape (no gradients):

    - ``"columns"``: short vectors along a strided axis, summed one contiguous column
      at a time where each column is at least a core's L2 (:func:`_columns_win`).
    - ``"numpy"``: NumPy's fused loops on zero-copy views read each input once, where
      torch's product and sum write and reread a product: three times the traffic.
      So: short contiguous vectors (``einsum`` in Fortran order); contiguous vectors
      whose product leaves the cores' L2s (CACHE_BYTES), and strided ones whose product
      leaves all the caches (LLC_BYTES); long contiguous ones from NUMPY_MIN
      elements while both inputs fit one core's L2 (NumPy's one thread reads them at
      the cache's speed; 256x128: 7 us against 21); strided ones from
      STRIDED_NUMPY_MIN elements (einsum, 256x128: 10 us against 23) and FEW_VECTORS
      vectors (einsum's inner loop runs across the vectors: 16x4096 transposed, 27.7
      us against torch's 24.7 on an AMD EPYC).
    - ``"bmm"``: short contiguous vectors past all the caches (LLC_BYTES), and those
      shorter than a cache line past half of them: one batched matrix product reads
      each input once with every thread, where NumPy's einsum pays per vector and
      torch's product and sum writes and rereads a product from memory. Within the L3
      that product stays in it, and ``"native"`` wins (AMD EPYC, 65536x16: 240-348 us
      against 276-462 us for bmm; 131072x16: 0.80 ms against 0.94), except for
      vectors shorter than a cache line past half the L3 (262144x8: 0.74 ms against
      0.91; 10^6x4: 2.6 ms against 3.9).
    - ``"native"``: ``torch.linalg.vecdot``: below those sizes (the trip through NumPy
      costs more), for short contiguous vectors in the caches and long ones past one
      core's L2 (torch's threads read faster), and for strided vectors past the cores'
      L2s not summed by columns: those of at most SHORT_BYTES at any size (NumPy's
      einsum pays per vector), the others while they fit the L3, which torch's threads read faster
      than NumPy's one (AMD EPYC, 32 MiB L3, 256x4096 transposed: 141 us against 178;
      past it NumPy's single pass wins, 4096x1024: 1.42 ms against 1.89).
    """
    if _columns_win(x1, x2, axis):
        return "columns"
    if _mul_sum_wins(x1, x2, axis):
        return "native"
    a, b = numpy_view(x1), numpy_view(x2)
    kernel = _kernel(a, b, axis)
    if kernel == "einsum_f":
        return "numpy"
    nbytes = a.nbytes + b.nbytes
    unit = numpy_vecdot._unit(a, axis) and numpy_vecdot._unit(b, axis)
    if nbytes >= CACHE_BYTES:
        if unit and kernel == "einsum":
            # Vectors shorter than a cache line: torch reduces each in scalar steps,
            # and its product no longer stays in the L3 from half of it.
            spills = nbytes >= LLC_BYTES // 2 and a.shape[axis] * a.itemsize < LINE_BYTES
            return "bmm" if axis == -1 and (nbytes >= LLC_BYTES or spills) else "native"
        if not unit and (a.shape[axis] * a.itemsize <= SHORT_BYTES or nbytes < LLC_BYTES):
            return "native"
        return "numpy"
    if unit:
        fits = kernel == "vecdot" and a.size >= NUMPY_MIN and nbytes < L2_BYTES
        return "numpy" if fits else "native"
    many = a.size >= FEW_VECTORS * a.shape[axis]  # einsum's inner loop runs across them
    return "numpy" if a.size >= STRIDED_NUMPY_MIN and many else "native"


def _numpy_plan(x1: torch.Tensor, x2: torch.Tensor) -> Any:
    """NumPy's kernel for equal shapes along the last axis (NumPy's own one-call plan,
    :func:`~portops._backends.numpy.vecdot._direct`), called on zero-copy views, or None
    where :func:`vecdot_numpy`'s general path is needed (1-d inputs, whose result is a
    scalar; complex einsum, which needs ``conj(x1)``)."""
    if x1.ndim < 2 or x1.dtype not in _NATIVE_SMALL:
        return None
    f = numpy_vecdot._direct(numpy_view(x1), numpy_view(x2))
    if f is None:
        return None
    # Operands used again (a loop, a benchmark) skip the views' cost: 500x500 float32,
    # 43 us against 46 with new views each call, beside torch's 48.
    views = ViewMemo().views

    def plan(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(f(*views(x1, x2)))

    return plan


def _bmm(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Equal shapes along the last axis as one batched product of (1, n) and (n, 1)."""
    return torch.matmul(x1.unsqueeze(-2), x2.unsqueeze(-1))[..., 0, 0]


def _grad_plan(a: VecdotArgs) -> Any:
    """Plan of a call with gradients (the plan key records them), for one dtype that
    torch's vecdot keeps: what :func:`_torch_cpu` runs, without its dispatch (about 20
    us a call, half a 500x500 call): ``torch.linalg.vecdot``, differentiable, below
    GRAD_SMALL elements, else the autograd Function; None for other dtypes."""
    x1, x2 = a.x1, a.x2
    if x1.dtype is not x2.dtype or x1.dtype not in _NATIVE_SMALL:
        return None
    axis, keepdims = a.axis, a.keepdims
    if _native_autograd_wins(x1, x2):
        return _native(axis, keepdims)

    def differentiable(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _Vecdot.apply(x1, x2, axis, keepdims)  # type: ignore[no-untyped-call]
        return out

    return differentiable


def _plan_cpu(a: VecdotArgs) -> Any:
    """Plan of a call (see portops._plans): one torch call where it is the fastest,
    else NumPy's kernels on zero-copy views or torch's per-vector BLAS dots; with
    gradients, see :func:`_grad_plan`."""
    x1, x2 = a.x1, a.x2
    if torch.compiler.is_compiling():
        return None
    if (x1.requires_grad or x2.requires_grad) and torch.is_grad_enabled():
        return _grad_plan(a)
    axis, keepdims = a.axis, a.keepdims
    if x1.dtype is x2.dtype and x1.dtype in _NATIVE_SMALL:
        if x1.shape != x2.shape and x1.dtype in _REAL and axis == -1 and not keepdims:
            matvec = _matvec(x1, x2)
            if matvec is not None:
                return matvec
        if x1.numel() < NATIVE_SMALL and x2.numel() < NATIVE_SMALL:
            return _native(axis, keepdims)  # tiny: the trip through NumPy costs more
        if x1.shape == x2.shape:
            row_dots = row_dots_plan(x1, x2, keepdims) if axis == -1 else None
            if row_dots is not None:
                return row_dots  # long contiguous vectors: one BLAS dot each
            how = _equal_shapes(x1, x2, axis)
            if how == "native":
                return _native(axis, keepdims)
            if how == "columns":
                return _columns(axis, keepdims)
            if how == "bmm" and not keepdims and x1.dtype in _REAL:
                return _bmm
            if how == "numpy" and axis == -1 and not keepdims:
                direct = _numpy_plan(x1, x2)
                if direct is not None:
                    return direct
    return lambda x1, x2: forward_cpu(x1, x2, axis, keepdims)


extend.register(
    "vecdot",
    "torch_cpu",
    libraries=("torch",),
    devices=("cpu",),
    priority=Priority.SPECIALIZED,
    planner=_plan_cpu,
)(_torch_cpu)
