"""NumPy einsum: the batched-matmul lowering with NumPy's own functions (views where
possible), making sure every matrix handed to ``matmul`` is one BLAS can read."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _dispatch
from ..._einsum.execute import ArrayAPIOps, cast, run
from ...einsum import EinsumArgs


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


def numpy_matmul(a: EinsumArgs) -> Any:
    """Batched matmul lowering with NumPy views and BLAS-ready layouts."""
    operands = cast(a.operands, a.dtype, _OPS)
    if a.dtype.kind == "O":  # Python objects: no BLAS to lower to
        return np.einsum(a.subscripts, *operands)
    r = run(a.plan, operands, _OPS, a.plan_for)
    return r[()] if r.ndim == 0 else r  # a NumPy scalar, as numpy.einsum returns


def numpy_einsum(a: EinsumArgs) -> Any:
    """numpy.einsum itself (with its own optimize=True), for comparison."""
    return np.einsum(a.subscripts, *cast(a.operands, a.dtype, _OPS), optimize=True)


def _native_applies(a: EinsumArgs) -> str | None:
    if a.plan.slices:
        return "memory_limit needs chunking, which numpy.einsum does not do"
    if not a.subscripts.isascii():
        return "more labels than numpy.einsum's 52 letters"
    return None


_dispatch.register("einsum", "numpy_matmul", libraries=["numpy"], priority=10)(numpy_matmul)
_dispatch.register(
    "einsum", "numpy_einsum", libraries=["numpy"], priority=-10, applies=_native_applies
)(numpy_einsum)
