"""vecdot of long contiguous vectors on torch's CPU threads, one BLAS dot per vector.

torch has no fused product and sum over an axis: ``torch.linalg.vecdot`` writes the
whole product and reads it back (three times the bytes of one pass), NumPy's fused
loop runs on one thread, and ``bmm`` runs one tiny GEMM per vector. The backward of
``embedding_bag``'s per-sample weights is the missing kernel: ``out[i] =
dot(grad[bag[i]], weight[index[i]])``, one BLAS dot per row, the rows split over
torch's threads. With the identity as both indices it is the row-wise dot product of
two matrices, each input read once by every thread (2-core AMD EPYC, float32: 500x500
34 us against 41 for ``torch.linalg.vecdot``; 2048x512 68 us against 98 for NumPy's
loop on views).

The operator is private to torch: the strategy is offered only where the installed
torch has it (:data:`AVAILABLE`), and the other strategies serve everywhere else.
It has no derivative, so only calls that need none take it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._tables import TORCH

__all__ = ["AVAILABLE", "applies", "plan"]

try:  # a capability check: where a torch lacks the operator, the other plans serve
    _ROW_DOTS: Any = torch.ops.aten._embedding_bag_per_sample_weights_backward.default
except (AttributeError, RuntimeError):
    _ROW_DOTS = None
AVAILABLE = _ROW_DOTS is not None
_SUM = 0  # embedding_bag's mode "sum", the only one with per-sample weights
_DTYPES = frozenset({torch.float32, torch.float64})  # BLAS dots; others loop in C++
# The kernel's rows per task (ATen's grain): fewer than two tasks run on one thread.
_GRAIN = 64


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """`t` as a (rows, n) view, or None where its leading dimensions do not merge."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def applies(x1: torch.Tensor, x2: torch.Tensor, threads: int, l2: int) -> bool:
    """Whether one BLAS dot per vector reads least for two CPU tensors of one shape
    and real dtype reduced along the last axis: vectors of at least ``row_dots_bytes``
    with unit stride, at least two tasks, both inputs past one core's L2 together
    (below, NumPy's one thread reads them at the cache's speed), two threads or more."""
    if not AVAILABLE or x1.dtype not in _DTYPES or x1.dtype is not x2.dtype or x1.ndim == 0:
        return False
    n = x1.shape[-1]
    rows = math.prod(x1.shape[:-1])
    size = x1.element_size()
    if n * size < TORCH["row_dots_bytes"] or rows < 2 * _GRAIN or 2 * rows * n * size < l2:
        return False
    if x1.stride(-1) != 1 or x2.stride(-1) != 1 or threads < 2:
        return False
    return _rows(x1) is not None and _rows(x2) is not None


def plan(like: torch.Tensor, keepdims: bool) -> Any:
    """The plan for tensors of `like`'s signature (see :func:`applies`). It holds a
    4-byte index per row (the identity), built once."""
    n = like.shape[-1]
    rows = math.prod(like.shape[:-1])
    index = torch.arange(rows, dtype=torch.int32 if rows < 2**31 else torch.int64)
    op = _ROW_DOTS
    shape = (*like.shape[:-1], 1) if keepdims else like.shape[:-1]

    def row_dots(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = op(x1.view(rows, n), x2.view(rows, n), index, index, index, _SUM)
        return out.view(shape)

    return row_dots
