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
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._caches import l2_bytes

__all__ = ["row_dots_plan"]

try:  # a private operator: where a torch lacks it, the other plans serve
    _ROW_DOTS: Any = torch.ops.aten._embedding_bag_per_sample_weights_backward.default
except (AttributeError, RuntimeError):
    _ROW_DOTS = None
_SUM = 0  # embedding_bag's mode "sum", the only one with per-sample weights
_DTYPES = frozenset({torch.float32, torch.float64})  # BLAS dots; others loop in C++
# The kernel's rows per task: fewer than two tasks run on one thread.
GRAIN = 64
# A BLAS call per vector costs about what streaming a few hundred bytes does; from this
# length a vector repays it (AMD EPYC, 4 MB inputs: 512-byte vectors 1.0-1.4x the
# other plans, 1 KiB ones 0.5-0.8x).
ROW_BYTES = 1024
# Below one core's L2 (both inputs together) NumPy's loop on one thread reads them at
# the cache's speed, and starting the threads costs more than they save.
MIN_BYTES = l2_bytes()


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """`t` as a (rows, n) view, or None where its leading dimensions do not merge."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def row_dots_plan(x1: torch.Tensor, x2: torch.Tensor, keepdims: bool) -> Any:
    """A plan for two CPU tensors of one shape and real dtype, reduced along the last
    axis, where one BLAS dot per vector on torch's threads reads the least: vectors
    of at least ROW_BYTES with unit stride, at least two tasks of GRAIN rows, both
    inputs past one core's L2 together, and two threads or more; else None.

    The plan holds a 4-byte index per row (the identity), built once.
    """
    if _ROW_DOTS is None or x1.dtype not in _DTYPES or x1.ndim == 0:
        return None
    n = x1.shape[-1]
    rows = math.prod(x1.shape[:-1])
    size = x1.element_size()
    if n * size < ROW_BYTES or rows < 2 * GRAIN or 2 * rows * n * size < MIN_BYTES:
        return None
    if x1.stride(-1) != 1 or x2.stride(-1) != 1 or torch.get_num_threads() < 2:
        return None
    if _rows(x1) is None or _rows(x2) is None:  # the key fixes the strides: so will later calls
        return None
    index = torch.arange(rows, dtype=torch.int32 if rows < 2**31 else torch.int64)
    op = _ROW_DOTS
    if x1.ndim == 2 and not keepdims:

        def row_dots(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = op(x1, x2, index, index, index, _SUM)
            return out

        return row_dots
    shape = (*x1.shape[:-1], 1) if keepdims else x1.shape[:-1]

    def row_dots_reshaped(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = op(x1.view(rows, n), x2.view(rows, n), index, index, index, _SUM)
        return out.view(shape)

    return row_dots_reshaped
