"""The sheared cube of CASSI (``shear``: each channel shifted into a wider axis, no sum)
and its left inverse ``unshear``; validated once into a :class:`ShearArgs`.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from .. import _dispatch
from .. import _validate as check
from .._arrays import inspect_operands
from .._dtypes import result_dtype
from .._plans import PlanCache, step_key
from .._types import ArrayT
from .shift_sum import _check_array, _normalize_mask, _normalize_offsets, _x_width, run_planned

__all__ = ["ShearArgs", "dispersion_offsets", "shear", "unshear"]


class ShearArgs(NamedTuple):
    """Normalised arguments shared by every shear / unshear implementation.

    ``array`` is ``x`` (shear) or ``y`` (unshear). ``offsets`` are the whole-pixel parts
    ``n_c``; ``fractions`` is None for integer dispersion, else the parts ``f_c`` in
    ``[0, 1)`` (channel ``c`` goes ``1 - f_c`` to ``n_c`` and ``f_c`` to ``n_c + 1``).
    ``mask`` is None or has ``x``'s ndim. ``dtype`` and ``shape`` are the result's.
    """

    array: Any
    offsets: tuple[int, ...]
    fractions: tuple[float, ...] | None
    axis: int
    channel_axis: int
    mask: Any
    xp: Any
    dtype: Any
    shape: tuple[int, ...]


def growth(offsets: tuple[int, ...], fractions: tuple[float, ...] | None) -> int:
    """How much the shifted axis lengthens: ``ceil(max(o))``."""
    if fractions is None:
        return max(offsets)
    return max(n + (f > 0) for n, f in zip(offsets, fractions, strict=True))


def _fractional(v: Any) -> bool:
    """A real number that is not an integer type (float, NumPy float, ...)."""
    return isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral)


def dispersion_offsets(
    step: Any, channels: int
) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
    """Whole-pixel offsets ``n_c`` and fractions ``f_c`` (None if all 0), ``min(o) == 0``."""
    if isinstance(step, (AbstractSet, Mapping)):  # (sets have no order)
        raise TypeError(
            f"step must be a number or a sequence of numbers, got {type(step).__name__}"
        )
    if not isinstance(step, (Sequence, numbers.Number, str, bytes)) and hasattr(step, "__len__"):
        step = list(step)  # NumPy or other 1-d arrays
    if _fractional(step):
        values = [c * float(step) for c in range(channels)]
    elif isinstance(step, Sequence) and not isinstance(step, (str, bytes)):
        if not any(_fractional(v) for v in step):
            return _normalize_offsets(step, channels), None
        for v in step:
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"step must contain numbers, got {type(v).__name__}")
        if len(step) != channels:
            raise ValueError(f"step has {len(step)} offsets but there are {channels} channels")
        values = [float(v) for v in step]
    else:
        return _normalize_offsets(step, channels), None
    # Not math.isfinite / math.floor: torch.compile traces those as tensor operations.
    if not all(-math.inf < v < math.inf for v in values):
        raise ValueError(f"step must be finite, got {step!r}")
    low = min(values)
    whole = [int(v - low) for v in values]  # v - low >= 0: truncation is the floor
    fractions = [v - low - n for v, n in zip(values, whole, strict=True)]
    return tuple(whole), (tuple(fractions) if any(fractions) else None)


def _prepare(
    kind: str, arr: Any, step: Any, *, axis: int = -1, channel_axis: int = -3, mask: Any = None
) -> _dispatch.Call:
    """Validate a ``"shear"`` (`arr` is x) or ``"unshear"`` (`arr` is y) call."""
    name = "x" if kind == "shear" else "y"
    lib, (arr, mask) = inspect_operands((name, "mask"), (arr, mask))
    _check_array(arr, name)
    xp = lib.xp
    check.check_dtype(xp, arr, name)
    ax, cax = check.axis_pair(axis, channel_axis, arr.ndim)
    offsets, fractions = dispersion_offsets(step, arr.shape[cax])
    if fractions is not None and not check.has_dtype(xp, arr.dtype, check.FLOATING):
        raise TypeError(
            f"{name} must have a floating-point dtype for a fractional step "
            f"(linear interpolation), got {arr.dtype}"
        )
    grow = growth(offsets, fractions)
    x_shape, out_shape = list(arr.shape), list(arr.shape)
    if kind == "shear":
        out_shape[ax] += grow
        check.check_fits(out_shape, getattr(arr.dtype, "itemsize", 8), ("step", step), lib.library)
    else:
        x_shape[ax] = out_shape[ax] = _x_width(arr.shape[ax], axis, len(offsets), grow)
    m = _normalize_mask(xp, mask, tuple(x_shape), arr.dtype)
    dtype = result_dtype(xp, arr, m)
    args = ShearArgs(arr, offsets, fractions, ax, cax, m, xp, dtype, tuple(out_shape))
    return _dispatch.Call(lib.library, lib.device, args)


_prepare_shear = functools.partial(_prepare, "shear")
_prepare_unshear = functools.partial(_prepare, "unshear")
_dispatch.define_operation("shear", _prepare_shear, lambda a: (a.array, a.mask))
_dispatch.define_operation("unshear", _prepare_unshear, lambda a: (a.array, a.mask))
# Plans of repeated calls (portops._plans): a plan takes the raw (array, mask).
SHEAR_PLANS = PlanCache("shear")
UNSHEAR_PLANS = PlanCache("unshear")


def _call(
    op: str, plans: PlanCache, array: ArrayT, step: Any, axis: Any, cax: Any, mask: Any
) -> ArrayT:
    """Run `op` through the plan of this call's signature, planning it on a first call."""
    key = step_key(step, (int, float))
    known = key is not None and type(axis) is int and type(cax) is int
    kw = {"axis": axis, "channel_axis": cax, "mask": mask}
    out: ArrayT = run_planned(op, plans, (key, axis, cax) if known else None, array, mask, step, kw)
    return out


def shear(
    x: ArrayT,
    step: float | Sequence[float],
    *,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
) -> ArrayT:
    """Shift channel ``c`` of `x` by ``o_c`` into an axis lengthened by ``max(o)``.

    ``out[..., c, h, w + o_c] = (mask * x)[..., c, h, w]`` and 0 elsewhere, with
    ``o_c = c * step`` normalised so that ``min(o) == 0``: the sheared cube of CASSI
    (MST's ``shift``, its ``mask_3d_shift``). Summing the result over `channel_axis`
    gives :func:`portops.shift_sum`; :func:`unshear` is its adjoint and left inverse.

    Parameters
    ----------
    x : array
        Input with a channel axis, for example ``(B, C, H, W)``; integer, real or
        complex floating dtype (floating for a fractional step). Not modified.
    step : int, float, or sequence of them
        Shift per channel, or the ``C`` offsets themselves (non-linear dispersion).
        Fractional values shift by linear interpolation: channel ``c`` with offset
        ``n + f`` goes ``(1 - f)`` to ``n`` and ``f`` to ``n + 1``, and the axis
        lengthens by ``ceil(max(o))`` (DeepInverse's ``shear_factor=0.5`` is
        ``step=0.5``).
    axis : int, optional
        Axis along which channels are shifted (default: the last).
    channel_axis : int, optional
        Axis that holds the channels (default ``-3``; ``-1`` with ``axis=-2`` for
        channels-last ``(H, W, C)`` data).
    mask : array, optional
        Coded aperture multiplied into `x` before shifting; broadcasts against `x`.

    Returns
    -------
    array
        `x`'s shape with `axis` lengthened by ``ceil(max(o))``; dtype
        ``result_type(x, mask)``; same library and device as `x`.

    Raises
    ------
    TypeError
        If `x` or `mask` is not an array, they come from two libraries, `step` is not
        made of numbers, or a fractional step meets an integer `x`.
    ValueError
        If the axes coincide or are out of range, `step` has the wrong length, `mask`
        does not broadcast, or the arrays are on two devices.

    Examples
    --------
    >>> import numpy as np, portops
    >>> x = np.array([[1, 1], [2, 2], [3, 3]])
    >>> portops.shear(x, 1, channel_axis=0)
    array([[1, 1, 0, 0],
           [0, 2, 2, 0],
           [0, 0, 3, 3]])
    """
    return _call("shear", SHEAR_PLANS, x, step, axis, channel_axis, mask)


def unshear(
    y: ArrayT,
    step: float | Sequence[float],
    *,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
) -> ArrayT:
    """Crop each channel's window of a sheared cube: the adjoint of :func:`shear`.

    ``x[..., c, h, w] = conj(mask) * y[..., c, h, w + o_c]`` (the 4-D ``shift_back``
    of MST, MST++ and BiSRNet), so that ``<shear(x), y> == <x, unshear(y)>`` and,
    without a mask, ``unshear(shear(x)) == x``. For a fractional offset ``n + f`` the
    window is interpolated: ``(1 - f) * y[n + w] + f * y[n + 1 + w]``.

    Parameters
    ----------
    y : array
        Sheared cube, shaped like the output of :func:`shear` with the same keyword
        arguments (a wider `y` is cropped to the first ``W`` columns of each window).
        Not modified.
    step : int, float, or sequence of them
        As for :func:`shear`; the number of channels is ``y.shape[channel_axis]``.
    axis, channel_axis : int, optional
        As for :func:`shear`.
    mask : array, optional
        The same mask as given to :func:`shear`; broadcasts against the result.

    Returns
    -------
    array
        `y`'s shape with `axis` shortened by ``ceil(max(o))``; dtype
        ``result_type(y, mask)``.

    Raises
    ------
    TypeError, ValueError
        As for :func:`shear`; also when `y` is too narrow for its channels' offsets.

    Examples
    --------
    >>> import numpy as np, portops
    >>> y = portops.shear(np.arange(6).reshape(3, 2), 1, channel_axis=0)
    >>> portops.unshear(y, 1, channel_axis=0)
    array([[0, 1],
           [2, 3],
           [4, 5]])
    """
    return _call("unshear", UNSHEAR_PLANS, y, step, axis, channel_axis, mask)
