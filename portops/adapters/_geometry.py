"""Shapes of the shift_sum operator's domain and range, from the arguments alone."""

from __future__ import annotations

import operator
from collections.abc import Sequence

from .. import _validate as check
from .._ops.shift_sum import _normalize_offsets


def measurement_shape(
    x_shape: Sequence[int],
    step: int | Sequence[int],
    *,
    axis: int = -1,
    channel_axis: int = -3,
    keepdims: bool = False,
) -> tuple[int, ...]:
    """The shape of ``shift_sum(x, step, ...)`` for ``x`` of shape `x_shape`, with the
    checks of :func:`portops.shift_sum` on the axes and the offsets."""
    shape = [operator.index(n) for n in x_shape]
    ax, cax = check.axis_pair(axis, channel_axis, len(shape))
    shape[ax] += max(_normalize_offsets(step, shape[cax]))
    if keepdims:
        shape[cax] = 1
    else:
        del shape[cax]
    return tuple(shape)
