"""shift_sum as a SciPy ``LinearOperator`` on flattened NumPy vectors."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._ops.shift_sum import shift_sum, shift_sum_adjoint, shift_sum_pinv
from .._validate import dims
from ._geometry import measurement_shape


def shift_sum_linear_operator(
    x_shape: Sequence[int],
    step: int | Sequence[int],
    *,
    mask: Any = None,
    axis: int = -1,
    channel_axis: int = -3,
    dtype: Any = None,
) -> Any:
    """:func:`portops.shift_sum` as a ``scipy.sparse.linalg.LinearOperator``.

    The operator maps ``x.ravel()`` (``x`` of shape `x_shape`) to the flattened
    measurement; its ``rmatvec`` is :func:`portops.shift_sum_adjoint`, so SciPy's
    iterative solvers (``lsqr``, ``lsmr``, ``cg`` on the normal equations) can use it.

    Parameters
    ----------
    x_shape : sequence of int
        Shape of the unknown cube, for example ``(C, H, W)`` or ``(B, C, H, W)``.
    step : int or sequence of int
        Shift per channel, or the offsets, as for :func:`portops.shift_sum`.
    mask : numpy.ndarray, optional
        Coded aperture, broadcasting against `x_shape`.
    axis, channel_axis : int, optional
        As for :func:`portops.shift_sum`.
    dtype : numpy dtype, optional
        The operator's dtype; default float64, or complex128 for a complex mask.

    Returns
    -------
    scipy.sparse.linalg.LinearOperator
        With extra attributes ``x_shape`` and ``y_shape`` and a method
        ``pinv(y)``: the exact minimum-norm solution :func:`portops.shift_sum_pinv`
        (LSQR started from zero converges to the same vector).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.sparse.linalg import lsqr
    >>> from portops.adapters import shift_sum_linear_operator
    >>> A = shift_sum_linear_operator((4, 5, 6), 1)
    >>> A.shape
    (45, 120)
    >>> y = A.matvec(np.ones(A.shape[1]))
    >>> x = lsqr(A, y, atol=1e-12, btol=1e-12)[0]
    >>> bool(np.allclose(x, A.pinv(y)))
    True
    """
    from scipy.sparse.linalg import LinearOperator

    x_shape = dims(x_shape, "x_shape")
    y_shape = measurement_shape(x_shape, step, axis=axis, channel_axis=channel_axis)
    if dtype is None:
        dtype = np.result_type(np.float64, mask.dtype) if mask is not None else np.float64
    keywords = {"axis": axis, "channel_axis": channel_axis, "mask": mask}
    transposed = {"channels": x_shape[channel_axis], **keywords}

    def matvec(v: np.ndarray) -> np.ndarray:
        return np.reshape(shift_sum(np.reshape(v, x_shape), step, **keywords), -1)

    def rmatvec(v: np.ndarray) -> np.ndarray:
        return np.reshape(shift_sum_adjoint(np.reshape(v, y_shape), step, **transposed), -1)

    def pinv(v: np.ndarray) -> np.ndarray:
        return np.reshape(shift_sum_pinv(np.reshape(v, y_shape), step, **transposed), -1)

    op = LinearOperator(
        (math.prod(y_shape), math.prod(x_shape)), matvec=matvec, rmatvec=rmatvec, dtype=dtype
    )
    op.x_shape, op.y_shape, op.pinv = x_shape, y_shape, pinv
    return op
