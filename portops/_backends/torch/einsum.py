"""PyTorch einsum (CPU and CUDA): the batched-matmul lowering with torch's own
functions (views, autograd, ``torch.compile``-friendly), and torch.einsum itself.

On CPU tensors that need no gradient, the equations where ``numpy.einsum``'s loop beats
the lowering (small, or no GEMM: see :func:`portops._backends.numpy.einsum.loop_wins`)
run that loop on zero-copy NumPy views: torch has no fused loop of its own, and
``torch.einsum`` makes them one tiny GEMM per row (``nc,nc->n``, 10^6 x 2, 2-core AMD
EPYC: 4.6 ms in NumPy's loop, 12-16 ms in torch.einsum, 47 ms in the lowering)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ... import extend
from ..._einsum.execute import ArrayAPIOps, cast, run
from ..._einsum.plan import Plan
from ..._einsum.program import Program, Programs, Spelling, runner
from ..._ops.einsum import EinsumArgs
from ...extend import Priority
from ..numpy.c_loops import c_einsum
from ..numpy.einsum import loop_order, loop_wins, tiny
from .cpu_blas import mkl_off_intel
from .views import numpy_view


def integer_matmul(a: Any, b: Any) -> Any:
    """matmul by multiply-and-sum over K, exact in any dtype (CUDA GEMMs refuse
    integers). The broadcast temporary is ``batch * M * K * N`` elements."""
    return torch.sum(a.unsqueeze(-1) * b.unsqueeze(-3), dim=-2, dtype=a.dtype)


def _as_batch_of_matrices(x: Any) -> Any:
    """`x` (batch axes, then a matrix) as one ``[batch, rows, cols]`` array for bmm.

    A view where the batch axes merge into one stride; otherwise one copy, laid out so
    that the axis with unit stride stays innermost (a straight copy, not a transposing
    one): a transposed view is copied as its transpose and handed over transposed again,
    which BLAS takes through its transpose flag. torch.matmul would make the same copy
    (in row-major order) and then call bmm; looping over a batch axis instead runs one
    parallel region per slice, and each waits for a descheduled thread on a busy machine
    (``bind,bjnd->bnij``, 64 slices: 0.4-1 s against 30 ms on a loaded 2-core host).
    """
    rows, cols = x.shape[-2], x.shape[-1]
    if x.stride(-2) == 1 and x.stride(-1) != 1 and rows > 1:
        return x.transpose(-1, -2).reshape(-1, cols, rows).transpose(1, 2)
    return x.reshape(-1, rows, cols)


class TorchOps(ArrayAPIOps):
    """Plan primitives as torch calls."""

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    # Tensor's own methods, called unbound: one Python frame less per instruction.
    reshape = staticmethod(torch.Tensor.reshape)  # type: ignore[assignment]
    permute = staticmethod(torch.Tensor.permute)  # type: ignore[assignment]

    def swap(self, x: Any) -> Any:
        return x.transpose(-1, -2)

    def diag(self, x: Any, axes: tuple[int, ...]) -> Any:
        others = [i for i in range(x.ndim) if i not in axes]
        x = x.permute((*others, *axes))
        for _ in range(len(axes) - 1):
            x = torch.diagonal(x, dim1=-2, dim2=-1)  # a differentiable view
        return x

    def sum(self, x: Any, axes: tuple[int, ...]) -> Any:
        return torch.sum(x, dim=axes, dtype=x.dtype)

    def any(self, x: Any, axes: tuple[int, ...]) -> Any:
        return torch.any(x, dim=axes)

    def logical_and(self, a: Any, b: Any) -> Any:
        return torch.logical_and(a, b)

    def matmul(self, a: Any, b: Any) -> Any:
        if not a.is_cpu and not (a.dtype.is_floating_point or a.dtype.is_complex):
            return integer_matmul(a, b)
        if a.ndim == 2 and a.shape[0] == 1 and b.shape[1] == 1:
            # One inner product: torch.dot reads both vectors once, where matmul's GEMM
            # path for a 1 x K by K x 1 product is several times slower on CPU.
            return torch.dot(a[0], b[:, 0]).reshape(1, 1)
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
            return torch.bmm(a, b)  # matmul's broadcasting logic costs several µs per call
        if a.ndim > 3 and a.shape[:-2] == b.shape[:-2]:
            # torch.matmul does this too, but copies without regard to the layout.
            r = torch.bmm(_as_batch_of_matrices(a), _as_batch_of_matrices(b))
            return r.view(*a.shape[:-2], a.shape[-2], b.shape[-1])
        return torch.matmul(a, b)

    def matmul_bool(self, a: Any, b: Any) -> Any:
        count = torch.float32 if a.shape[-1] < 2**24 else torch.float64
        return torch.matmul(a.to(count), b.to(count)) != 0

    def take(self, x: Any, axis: int, start: int, stop: int) -> Any:
        return x.narrow(axis, start, stop - start)

    def concat(self, parts: Any, axis: int) -> Any:
        return torch.cat(list(parts), dim=axis)


_OPS: dict[Any, TorchOps] = {}


def _ops(xp: Any) -> TorchOps:
    ops = _OPS.get(xp)
    if ops is None:
        ops = _OPS.setdefault(xp, TorchOps(xp))
    return ops


def torch_matmul(a: EinsumArgs) -> Any:
    """Batched matmul lowering with torch views (autograd flows through)."""
    ops = _ops(a.xp)
    return run(a.plan, cast(a.operands, a.dtype, ops), ops, a.plan_for)


def torch_einsum(a: EinsumArgs) -> Any:
    """torch.einsum on the whole equation (operands cast to the result dtype)."""
    return torch.einsum(a.subscripts, *cast(a.operands, a.dtype, _ops(a.xp)))


# Planners: for later calls with the same signature (shapes, strides, dtypes, device,
# gradient mode and requires_grad), a function of the operands alone. None where the
# operands need casting (the arguments record's path does it).


def _no_casts(a: EinsumArgs) -> bool:
    return all(x.dtype == a.dtype for x in a.operands)


def plan_matmul(a: EinsumArgs) -> Any:
    """:func:`torch_matmul` with its plan written out as straight-line code."""
    if not _no_casts(a) or a.lowering.slices:
        return None
    plan, plan_for, ops = a.plan, a.plan_for, _ops(a.xp)
    dtype, device = a.dtype, a.operands[0].device.type  # not the operands: kept
    return runner(
        lambda: _program_of(plan, dtype, device, ops),
        lambda *operands: run(plan, operands, ops, plan_for),
    )


def _pack_interleaved(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of the batched matrices `t` (a small GEMM operand on the CPU)
    whose batches interleave in memory (a batch stride below one matrix's elements, as
    when the batch axis is not the outermost): MKL's ``bmm`` reads them slowly on an
    Intel CPU (``bind,jnd->bnij``, MXNet shapes: 3.53 ms against 3.15 ms with the copy).
    Not where MKL runs its generic kernels (:func:`.cpu_blas.mkl_off_intel`): there the
    copy is the whole difference (2-core AMD EPYC: 1.6-4% slower with it)."""
    if t.is_cpu and 0 < t.stride(0) < t.shape[1] * t.shape[2] and not mkl_off_intel():
        return t.contiguous()
    return t


SPELLING = Spelling(
    module=torch,
    permute="{a}.permute({perm!r})",
    swap="{a}.transpose(-1, -2)",
    sum="{a}.sum({axes!r}, dtype=_dtype)",
    dot="xp.dot({a}, {b})",
    mv="xp.mv({a}, {b})",
    vm="xp.mv({b}.t(), {a})",
    mm="xp.mm({a}, {b})",
    bmm="xp.bmm({a}, {b})",
    batched="xp.matmul({a}, {b})",
    outer="xp.outer({a}, {b})",
    ops_calls=3,  # TorchOps primitives: permutes, views, then the call
    pack=_pack_interleaved,
)

_PROGRAMS = Programs(SPELLING)


def _program_of(plan: Plan, dtype: Any, device: str, ops: TorchOps) -> Program:
    # CUDA's dot/mv/mm refuse integers: those GEMMs stay with TorchOps.matmul.
    native = device == "cpu" or dtype.is_floating_point or dtype.is_complex
    return _PROGRAMS.get(plan, dtype, ops, (device,), native)


def _program(a: EinsumArgs) -> Program:
    return _program_of(a.plan, a.dtype, a.operands[0].device.type, _ops(a.xp))


def plan_einsum(a: EinsumArgs) -> Any:
    """:func:`torch_einsum` with its subscripts fixed."""
    if not _no_casts(a):
        return None
    subscripts, einsum = a.subscripts, torch.einsum
    return lambda *operands: einsum(subscripts, *operands)


def _native_applies(a: EinsumArgs) -> str | None:
    if a.lowering.slices:
        return "memory_limit needs chunking, which torch.einsum does not do"
    if not a.subscripts.isascii():
        return "more labels than torch.einsum's 52 letters"
    if a.dtype == torch.bool:
        return "torch.einsum does not take bool operands"
    if a.operands[0].device.type != "cpu" and not (a.dtype.is_floating_point or a.dtype.is_complex):
        return "torch.einsum on CUDA does not take integer operands"
    return None


def _cuda_default_applies(a: EinsumArgs) -> str | None:
    if a.lowering.slices:
        return "memory_limit needs chunking, which torch.einsum does not do"
    if not a.subscripts.isascii():
        return "more labels than torch.einsum's 52 letters"
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return "torch.einsum on CUDA is the default for floating and complex dtypes only"
    return None


# Dtypes NumPy shares with torch (bfloat16 and the unsigned ones have no NumPy view).
_NUMPY_DTYPES = frozenset(
    {torch.float32, torch.float64, torch.complex64, torch.complex128, torch.float16}
    | {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}
)


def torch_numpy_loop(a: EinsumArgs) -> Any:
    """numpy.einsum's loop on zero-copy NumPy views of CPU tensors (no autograd)."""
    ops = [numpy_view(x) for x in cast(a.operands, a.dtype, _ops(a.xp))]
    r = c_einsum(a.subscripts, *ops, order=loop_order(a.subscripts, ops))
    return torch.from_numpy(np.asarray(r))


def plan_numpy_loop(a: EinsumArgs) -> Any:
    """:func:`torch_numpy_loop` with its subscripts and loop order fixed."""
    if not _no_casts(a):
        return None
    subscripts = a.subscripts
    order = loop_order(subscripts, [numpy_view(x) for x in a.operands])

    def loop(*operands: Any) -> Any:
        r = c_einsum(subscripts, *[numpy_view(x) for x in operands], order=order)
        return torch.from_numpy(np.asarray(r))

    return loop


def _numpy_loop_applies(a: EinsumArgs) -> str | None:
    if a.dtype not in _NUMPY_DTYPES or any(x.dtype not in _NUMPY_DTYPES for x in a.operands):
        return "a dtype NumPy does not share"
    if a.operands[0].device.type != "cpu":
        return "not on the CPU"
    if torch.compiler.is_compiling():
        return "under torch.compile the lowering traces"
    if torch.is_grad_enabled() and any(x.requires_grad for x in a.operands):
        return "gradients needed: the lowering has them"
    # Not for outer products: torch's broadcast multiply holds its own on large ones
    # (2048^2 float32: 1.7 ms against 2.3 ms in NumPy's loop on the views). For every
    # matrix-vector product: torch.mv waits on its thread pool (see loop_wins).
    reason = loop_wins(a, outer_products=False)
    if reason is not None:
        return reason
    if tiny(a):
        calls = LOOP_CALLS_PER_OPERAND * max(a.lowering.n_operands - 1, 1)
        if _no_casts(a) and _program(a).calls <= calls:
            return "tiny, and the lowering is as few torch calls as the loop's own overhead"
        return None
    if not any(step.kind == "multiply-and-sum" for step in a.plan.steps):
        # Sums and diagonals alone: torch's reduction reads the operand once too, and on
        # every core (``ij->i``, 2048^2 float32: 0.33 ms against 0.65 ms in the loop).
        return "no product to fuse: torch's own reduction reads the operand once, threaded"
    return None


# On tiny operands, where the products cost nothing, the number of calls decides: the
# loop on views costs about as much Python as this many torch calls per operand past the
# first (views, the result's wrapper, numpy.einsum's dispatch, its iterator set-up).
LOOP_CALLS_PER_OPERAND = 3


extend.register(
    "einsum",
    "torch_matmul",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    planner=plan_matmul,
)(torch_matmul)
# On CUDA torch.einsum beat the lowering (H100: 43.9 vs 49.4 µs, 83.2 vs 90.2 µs, 41.7 vs
# 63.0 µs on the MXNet-issue patterns), so it is the default there for what it takes.
extend.register(
    "einsum",
    "torch_einsum_cuda",
    libraries=["torch"],
    devices=["cuda"],
    priority=Priority.OVERRIDE,
    applies=_cuda_default_applies,
    summary="torch.einsum itself, the CUDA default for floating and complex dtypes",
    planner=plan_einsum,
)(torch_einsum)
extend.register(
    "einsum",
    "torch_numpy_loop",
    libraries=["torch"],
    devices=["cpu"],
    priority=Priority.OVERRIDE,
    applies=_numpy_loop_applies,
    planner=plan_numpy_loop,
)(torch_numpy_loop)
extend.register(
    "einsum", "torch_einsum", libraries=["torch"], priority=Priority.NATIVE, applies=_native_applies
)(torch_einsum)
