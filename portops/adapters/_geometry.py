"""Shapes of the shift_sum operator's domain and range, from the arguments alone."""

from __future__ import annotations

import operator
from collections.abc import Sequence


def measurement_shape(
    x_shape: Sequence[int],
    step: int | Sequence[int],
    *,
    axis: int = -1,
    channel_axis: int = -3,
    keepdims: bool = False,
) -> tuple[int, ...]:
    """The shape of ``shift_sum(x, step, ...)`` for ``x`` of shape `x_shape`.

    Arguments are checked only as far as the shape needs; :func:`portops.shift_sum`
    validates them fully on the first application.
    """
    shape = [operator.index(n) for n in x_shape]
    ndim = len(shape)
    for name, value in (("axis", axis), ("channel_axis", channel_axis)):
        if not -ndim <= value < ndim:
            raise ValueError(f"{name}={value} is out of range for x_shape {tuple(shape)}")
    ax, cax = axis % ndim, channel_axis % ndim
    if ax == cax:
        raise ValueError(f"axis={axis} and channel_axis={channel_axis} name the same axis")
    channels = shape[cax]
    try:
        s = operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        offsets = [operator.index(o) for o in step]  # type: ignore[union-attr]
        if len(offsets) != channels:
            raise ValueError(
                f"step has {len(offsets)} offsets but x_shape has {channels} channels"
            ) from None
        span = max(offsets) - min(offsets)
    else:
        span = abs(s) * (channels - 1)
    shape[ax] += span
    if keepdims:
        shape[cax] = 1
    else:
        del shape[cax]
    return tuple(shape)
