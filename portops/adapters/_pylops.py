"""shift_sum as a PyLops ``LinearOperator`` (NumPy or CuPy arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from .._ops.shift_sum import shift_sum, shift_sum_adjoint
from .._validate import dims
from ._geometry import measurement_shape


@cache
def _operator_class() -> type:
    import pylops
    from pylops.utils.decorators import reshaped

    class ShiftSum(pylops.LinearOperator):  # type: ignore[misc]  # pylops has no stubs
        """The CASSI dispersion: dims = the cube's shape, dimsd = the measurement's."""

        def __init__(
            self,
            x_shape: tuple[int, ...],
            step: Any,
            mask: Any,
            axis: int,
            channel_axis: int,
            dtype: Any,
        ) -> None:
            y_shape = measurement_shape(x_shape, step, axis=axis, channel_axis=channel_axis)
            super().__init__(dtype=np.dtype(dtype), dims=x_shape, dimsd=y_shape, name="S")
            self.step, self.channels = step, x_shape[channel_axis]
            self.keywords = {"axis": axis, "channel_axis": channel_axis, "mask": mask}

        @reshaped  # type: ignore[untyped-decorator]
        def _matvec(self, x: Any) -> Any:
            return shift_sum(x, self.step, **self.keywords)

        @reshaped  # type: ignore[untyped-decorator]
        def _rmatvec(self, y: Any) -> Any:
            return shift_sum_adjoint(y, self.step, channels=self.channels, **self.keywords)

    return ShiftSum


def shift_sum_pylops(
    x_shape: Sequence[int],
    step: int | Sequence[int],
    *,
    mask: Any = None,
    axis: int = -1,
    channel_axis: int = -3,
    dtype: Any = "float64",
) -> Any:
    """:func:`portops.shift_sum` as a ``pylops.LinearOperator``.

    ``dims`` is `x_shape` and ``dimsd`` the measurement's shape, so ``Op @ x.ravel()``
    and ``Op.H @ y.ravel()`` work as for any PyLops operator, and the operator combines
    with PyLops' others (``pylops.VStack``, regularised inversion, ``pylops.optimization``
    solvers). NumPy and CuPy arrays both pass through (PyLops' own engine choice).

    Parameters
    ----------
    x_shape : sequence of int
        Shape of the unknown cube, for example ``(C, H, W)``.
    step : int or sequence of int
        Shift per channel, or the offsets, as for :func:`portops.shift_sum`.
    mask : array, optional
        Coded aperture, broadcasting against `x_shape`, from the arrays' library.
    axis, channel_axis : int, optional
        As for :func:`portops.shift_sum`.
    dtype : str or numpy dtype, optional
        The operator's dtype (default ``"float64"``).

    Returns
    -------
    pylops.LinearOperator

    Examples
    --------
    >>> from pylops.utils import dottest
    >>> from portops.adapters import shift_sum_pylops
    >>> Op = shift_sum_pylops((4, 5, 6), 2)
    >>> Op.dims, Op.dimsd
    ((4, 5, 6), (5, 12))
    >>> bool(dottest(Op, *Op.shape))
    True
    """
    shape = dims(x_shape, "x_shape")
    return _operator_class()(shape, step, mask, axis, channel_axis, dtype)
