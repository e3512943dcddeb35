"""The CASSI dispersion operator: shift each channel along an axis, then sum channels;
the public functions validate once into a :class:`ShiftSumArgs`.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial
from typing import Any, NamedTuple

from .. import _dispatch
from .. import _validate as check
from .._arrays import inspect_operands
from .._dtypes import accumulation_dtype, promote, result_dtype
from .._plans import PlanCache, step_key
from .._plans import key as plan_key
from .._types import ArrayT

__all__ = ["ShiftSumArgs", "shift_sum", "shift_sum_adjoint", "shift_sum_pinv"]


class ShiftSumArgs(NamedTuple):
    """Normalised arguments shared by every shift_sum implementation.

    ``array`` is ``x`` for the forward and ``y`` for the adjoint and the pseudo-inverse,
    whose channel axis is present with size 1, so ``axis`` and ``channel_axis`` index
    both layouts alike. ``mask`` is ``None`` or has ``x.ndim`` dimensions, each of size 1
    or the size of ``x``'s. ``dtype``, ``shape`` and ``acc_dtype`` describe the result:
    ``result_type(array, mask)``, its shape and the accumulation dtype (float32 for half
    precision), computed by :meth:`make`.
    """

    array: Any
    offsets: tuple[int, ...]
    axis: int
    channel_axis: int
    mask: Any
    keepdims: bool
    xp: Any
    dtype: Any
    shape: tuple[int, ...]
    acc_dtype: Any

    @classmethod
    def make(
        cls,
        kind: str,
        array: Any,
        offsets: tuple[int, ...],
        axis: int,
        channel_axis: int,
        mask: Any,
        keepdims: bool,
        xp: Any,
    ) -> ShiftSumArgs:
        """The record of a `kind` call, its result's dtype, shape and acc_dtype computed."""
        dtype = result_dtype(xp, array, mask)
        shape = list(array.shape)
        if kind == "forward":
            shape[axis] += max(offsets)
            if keepdims:
                shape[channel_axis] = 1
            else:
                del shape[channel_axis]
        else:
            shape[axis] -= max(offsets)
            shape[channel_axis] = len(offsets)
        acc = accumulation_dtype(xp, dtype)
        return cls(array, offsets, axis, channel_axis, mask, keepdims, xp, dtype, tuple(shape), acc)


def _integer_step(step: Any) -> int | None:
    """`step` as an int when it is one (not a bool), else None."""
    if isinstance(step, (bool, list, tuple)):
        return None  # no exception to catch: torch.compile traces this path
    try:
        return operator.index(step)
    except TypeError:
        return None


def _normalize_offsets(step: Any, channels: int | None) -> tuple[int, ...]:
    """Offsets ``o_c`` as a tuple of non-negative ints with ``min == 0``."""
    expected = "an integer or a sequence of integers"
    if isinstance(step, (bool, str, bytes, AbstractSet, Mapping)):  # (sets have no order)
        raise TypeError(f"step must be {expected}, got {type(step).__name__}")
    s = _integer_step(step)
    if s is not None:
        if channels is None:
            raise ValueError("channels is required when step is an integer")
        offsets = [c * s for c in range(channels)]
    else:
        if not isinstance(step, Sequence):
            try:
                step = list(step)  # NumPy or other 1-d arrays of integers
            except TypeError:
                raise TypeError(f"step must be {expected}, got {type(step).__name__}") from None
        offsets = check.integers(step, "step")
        if not offsets:
            raise ValueError("step must contain at least one offset")
        if channels is not None and len(offsets) != channels:
            raise ValueError(f"step has {len(offsets)} offsets but there are {channels} channels")
    low = min(offsets)
    return tuple(o - low for o in offsets)


def _check_array(a: Any, name: str) -> None:
    ndim = getattr(a, "ndim", None)
    if ndim is None:
        raise TypeError(f"{name} must be an array, got {type(a).__name__}")
    if ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions, got {ndim}")


def _check_torch_dtype(library: str, device: str, a: Any, name: str, *, forward: bool) -> None:
    """Reject torch dtypes whose needed arithmetic torch lacks (uint16/32/64, CPU complex32)."""
    if library != "torch":
        return
    dtype = str(a.dtype)
    if forward and dtype in ("torch.uint16", "torch.uint32", "torch.uint64"):
        raise TypeError(
            f"{name} has dtype {dtype}, for which torch has no addition; "
            "cast it to torch.int32 or torch.int64"
        )
    if not forward and device == "cpu" and dtype == "torch.complex32":
        raise TypeError(
            f"{name} has dtype {dtype}, which torch's CPU kernels do not support "
            "here; cast it to torch.complex64"
        )


def _check_known_shape(library: str, a: Any, name: str) -> None:
    """Sizes must be known (a Dask array after boolean indexing has NaN sizes)."""
    if library in ("numpy", "torch", "cupy"):
        return  # their sizes are always known
    for n in a.shape:
        try:
            operator.index(n)
        except TypeError:
            raise ValueError(
                f"{name} has unknown sizes (shape {tuple(a.shape)}); compute them "
                f"first, for a Dask array with {name}.compute_chunk_sizes()"
            ) from None


def _normalize_mask(
    xp: Any, mask: Any, x_shape: tuple[int, ...], dtype: Any, name: str = "x", library: str = ""
) -> Any:
    """Return `mask` with ``len(x_shape)`` dims, each 1 or equal to x's, or raise."""
    if mask is None:
        return None
    _check_known_shape(library, mask, "mask")
    if mask.ndim > len(x_shape):
        raise ValueError(
            f"mask has {mask.ndim} dimensions, more than x's {len(x_shape)}; "
            f"it must broadcast against x of shape {x_shape}"
        )
    shape = (1,) * (len(x_shape) - mask.ndim) + tuple(mask.shape)
    for m, n in zip(shape, x_shape, strict=True):
        if m != 1 and m != n:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast against x of shape {x_shape}"
            )
    if check.has_dtype(xp, mask.dtype, ("bool",)):
        mask = xp.astype(mask, dtype)  # binary masks are commonly bool
    elif not check.has_dtype(xp, mask.dtype, ("real floating", "complex floating", "integral")):
        raise TypeError(f"mask must have a numeric or bool dtype, got {mask.dtype}")
    try:
        promote(xp, dtype, mask.dtype)
    except (TypeError, RuntimeError):  # torch raises RuntimeError (uint16 with int64)
        raise TypeError(
            f"mask of dtype {mask.dtype} cannot be combined with {name} of dtype {dtype} by "
            "this library's type promotion; cast one of them"
        ) from None
    if mask.ndim != len(x_shape):
        mask = xp.reshape(mask, shape)
    return mask


def _prepare_forward(
    x: Any,
    step: Any,
    *,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
    keepdims: bool = False,
) -> _dispatch.Call:
    lib, (x, mask) = inspect_operands(("x", "mask"), (x, mask))
    _check_array(x, "x")
    xp = lib.xp
    check.check_dtype(xp, x, "x")
    _check_torch_dtype(lib.library, lib.device, x, "x", forward=True)
    ax, cax = check.axis_pair(axis, channel_axis, x.ndim)
    _check_known_shape(lib.library, x, "x")
    shape = tuple(x.shape)
    if shape[cax] == 0:
        raise ValueError(
            f"x has no channels (size 0 along channel_axis={channel_axis}); "
            "shift_sum needs at least one"
        )
    offsets = _normalize_offsets(step, shape[cax])
    y_shape = [n for d, n in enumerate(shape) if d != cax]
    y_shape[ax - (ax > cax)] += max(offsets)
    check.check_fits(y_shape, _itemsize(x.dtype), ("step", step), lib.library)
    m = _normalize_mask(xp, mask, shape, x.dtype, "x", lib.library)
    flag = check.flag(keepdims, "keepdims")
    args = ShiftSumArgs.make("forward", x, offsets, ax, cax, m, flag, xp)
    return _dispatch.Call(lib.library, lib.device, args)


def _prepare_transposed(
    y: Any,
    step: Any,
    *,
    channels: int | None = None,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
    keepdims: bool = False,
    floating_only: bool = False,
) -> _dispatch.Call:
    """Shared by the adjoint and the pseudo-inverse: `y` in, an `x`-shaped array out."""
    lib, (y, mask) = inspect_operands(("y", "mask"), (y, mask))
    if getattr(y, "ndim", None) is None:
        raise TypeError(f"y must be an array, got {type(y).__name__}")
    xp = lib.xp
    check.check_dtype(xp, y, "y", floating_only=floating_only)
    _check_torch_dtype(lib.library, lib.device, y, "y", forward=False)
    _check_known_shape(lib.library, y, "y")
    keepdims = check.flag(keepdims, "keepdims")
    x_ndim = y.ndim if keepdims else y.ndim + 1
    of = (
        "the result x" if keepdims else f"the result x (y's {y.ndim} dimensions and a channel axis)"
    )
    s = _integer_step(step)
    if channels is not None:
        channels = check.positive_int(channels, "channels")
        if s is not None and x_ndim >= 2:
            # Offsets that follow from two numbers: y and memory checked before building them.
            ax, cax = check.axis_pair(axis, channel_axis, x_ndim, of)
            grow = (channels - 1) * abs(s)
            _x_shape(y, keepdims, ax, cax, axis, channels, grow, ("channels", channels), lib)
    offsets = _normalize_offsets(step, channels)
    if x_ndim < 2:
        raise ValueError("y must have at least 1 dimension (2 with keepdims=True)")
    ax, cax = check.axis_pair(axis, channel_axis, x_ndim, of)
    if keepdims and y.shape[cax] != 1:
        raise ValueError(
            f"with keepdims=True, y must have size 1 along channel_axis={channel_axis}, "
            f"got {y.shape[cax]}"
        )
    x_shape = _x_shape(y, keepdims, ax, cax, axis, len(offsets), max(offsets), ("step", step), lib)
    if not keepdims:
        y = xp.expand_dims(y, axis=cax)
    m = _normalize_mask(xp, mask, tuple(x_shape), y.dtype, "y", lib.library)
    args = ShiftSumArgs.make("adjoint", y, offsets, ax, cax, m, keepdims, xp)
    return _dispatch.Call(lib.library, lib.device, args)


def _x_shape(
    y: Any, keepdims: bool, ax: int, cax: int, axis: Any, n: int, grow: int, culprit: Any, lib: Any
) -> list[int]:
    """The result's shape, once checked that `y` is wide enough and it fits in memory."""
    shape = list(y.shape)
    if not keepdims:
        shape.insert(cax, 1)
    shape[cax], shape[ax] = n, _x_width(shape[ax], axis, n, grow)
    check.check_fits(shape, _itemsize(y.dtype), culprit, lib.library)
    return shape


def _x_width(length: int, axis: Any, n: int, grow: int) -> int:
    """The adjoint's width from `y`'s `length` along `axis`: a ValueError if too narrow."""
    if length < grow:
        raise ValueError(
            f"y is too narrow: its axis {axis} has length {length}, but {n} "
            f"channels with offsets up to {grow} need at least {grow}"
        )
    return length - grow


def _itemsize(dtype: Any) -> int:
    """Bytes per element of a dtype of any library (8 where it does not say)."""
    size = getattr(dtype, "itemsize", None)
    return int(size) if isinstance(size, int) else 8


def _arrays(a: ShiftSumArgs) -> tuple[Any, Any]:
    return (a.array, a.mask)


_dispatch.define_operation("shift_sum", _prepare_forward, _arrays)
_dispatch.define_operation("shift_sum_adjoint", _prepare_transposed, _arrays)
_dispatch.define_operation(
    "shift_sum_pinv", partial(_prepare_transposed, floating_only=True), _arrays
)

# Plans of repeated calls (portops._plans): a plan takes (array, mask), the raw arguments.
FORWARD_PLANS = PlanCache("shift_sum")
ADJOINT_PLANS = PlanCache("shift_sum_adjoint")
PINV_PLANS = PlanCache("shift_sum_pinv")
_PLANS = {plans.op: plans for plans in (FORWARD_PLANS, ADJOINT_PLANS, PINV_PLANS)}


def _params(
    step: Any, channels: Any, axis: Any, channel_axis: Any, keepdims: Any
) -> tuple[Any, ...] | None:
    """The non-array arguments as a plan key part, or None for unusual types."""
    if type(axis) is not int or type(channel_axis) is not int or type(keepdims) is not bool:
        return None
    if channels is not None and type(channels) is not int:
        return None
    key = step_key(step)
    return None if key is None else (key, channels, axis, channel_axis, keepdims)


def _call(
    op: str,
    array: ArrayT,
    step: Any,
    channels: Any,
    axis: Any,
    channel_axis: Any,
    mask: Any,
    keepdims: Any,
) -> ArrayT:
    """Run `op` through the plan of this call's signature, planning it on a first call."""
    kw = {"axis": axis, "channel_axis": channel_axis, "mask": mask, "keepdims": keepdims}
    if op != "shift_sum":
        kw["channels"] = channels
    params = _params(step, channels, axis, channel_axis, keepdims)
    out: ArrayT = run_planned(op, _PLANS[op], params, array, mask, step, kw)
    return out


def run_planned(
    op: str, plans: PlanCache, params: Any, array: Any, mask: Any, step: Any, kw: dict[str, Any]
) -> Any:
    """`op` by the plan of its signature (`params`: the other arguments as a key part, or
    None for unusual types), planned by a first call."""
    key = None if params is None else plan_key(params, array, mask)  # None while torch traces
    if key is not None and not _dispatch.preferences_active():
        plan = plans.get(key)
        if plan is not None:
            return plan(array, mask)
    return _dispatch.invoke_planned(op, plans, key, (array, mask), array, step, **kw)


def shift_sum(
    x: ArrayT,
    step: int | Sequence[int],
    *,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
    keepdims: bool = False,
) -> ArrayT:
    """Shift channel ``c`` of `x` by ``o_c`` along `axis` and sum over channels.

    ``y[..., h, w'] = sum_c (mask * x)[..., c, h, w' - o_c]`` with ``o_c = c * step``
    normalised so that ``min(o) == 0`` (a negative step shifts the other way). This is
    the dispersion operator of coded-aperture snapshot spectral imaging (CASSI).

    Parameters
    ----------
    x : array
        Input with a channel axis, for example ``(B, C, H, W)``. Any array-API array
        (NumPy, CuPy, PyTorch, JAX, Dask, array-api-strict, ...); integer, real or
        complex floating dtype. Not modified.
    step : int or sequence of int
        Shift per channel, or the ``C`` offsets themselves (non-linear dispersion).
    axis : int, optional
        Axis along which channels are shifted (default: the last).
    channel_axis : int, optional
        Axis of ``x`` that holds the channels (default ``-3``; use ``-1`` with
        ``axis=-2`` for channels-last ``(H, W, C)`` data).
    mask : array, optional
        Coded aperture multiplied into `x` before shifting; broadcasts against `x`
        (for example ``(H, W)``, ``(C, H, W)`` or ``(B, C, H, W)``).
    keepdims : bool, optional
        Keep the channel axis with size 1 in the result.

    Returns
    -------
    array
        ``x``'s shape without `channel_axis` and with `axis` lengthened by
        ``max(o)``; dtype ``result_type(x, mask)``; same library and device as `x`.
        Half-precision inputs accumulate in float32.

    Raises
    ------
    TypeError
        If `x` or `mask` is not an array, they come from two libraries, or `step`
        is not made of integers.
    ValueError
        If the axes coincide or are out of range, `step` has the wrong length, `mask`
        does not broadcast, or the arrays are on two devices.

    Examples
    --------
    >>> import numpy as np, portops
    >>> x = np.array([[1, 1, 1], [2, 2, 2], [3, 3, 3]])
    >>> portops.shift_sum(x, 1, channel_axis=0)
    array([1, 3, 6, 5, 3])
    """
    return _call("shift_sum", x, step, None, axis, channel_axis, mask, keepdims)


def shift_sum_adjoint(
    y: ArrayT,
    step: int | Sequence[int],
    *,
    channels: int | None = None,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
    keepdims: bool = False,
) -> ArrayT:
    """The exact adjoint of :func:`shift_sum`: crop each channel's window and mask it.

    ``x[..., c, h, w] = conj(mask) * y[..., h, w + o_c]`` (the conjugate only matters
    for complex masks), so that ``<A x, y> == <x, A^H y>``.

    Parameters
    ----------
    y : array
        Measurement shaped like the output of :func:`shift_sum` with the same
        keyword arguments. Not modified.
    step : int or sequence of int
        As for :func:`shift_sum`.
    channels : int, optional
        Number of channels ``C``; required when `step` is an integer.
    axis, channel_axis : int, optional
        Axes in the layout of ``x`` (the result), as for :func:`shift_sum`.
    mask : array, optional
        The same mask as given to :func:`shift_sum`; broadcasts against the result.
    keepdims : bool, optional
        True when `y` keeps the channel axis with size 1.

    Returns
    -------
    array
        ``x``-shaped array with ``C`` channels and `axis` of length
        ``y.shape[axis] - max(o)``; dtype ``result_type(y, mask)``.

    Raises
    ------
    TypeError, ValueError
        As for :func:`shift_sum`; also when `y` is too narrow for the channels.
    """
    return _call("shift_sum_adjoint", y, step, channels, axis, channel_axis, mask, keepdims)


def shift_sum_pinv(
    y: ArrayT,
    step: int | Sequence[int],
    *,
    channels: int | None = None,
    axis: int = -1,
    channel_axis: int = -3,
    mask: Any = None,
    keepdims: bool = False,
) -> ArrayT:
    """The Moore-Penrose pseudo-inverse of :func:`shift_sum`.

    ``pinv(y) = A^H (y / Phi)`` with ``Phi = sum_c shift_c(|mask_c|^2)`` and 0 where
    ``Phi == 0``. Because ``A A^H`` is diagonal this is exact: ``A(pinv(y)) == y`` for
    every `y` in the range of ``A``, and ``pinv(y)`` is the minimum-norm solution. It
    stays finite for masks with zeros (unlike dividing by the overlap count and then
    by the mask).

    Parameters
    ----------
    y : array
        Measurement, real or complex floating dtype. Not modified.
    step, channels, axis, channel_axis, mask, keepdims
        As for :func:`shift_sum_adjoint`.

    Returns
    -------
    array
        ``x``-shaped array; dtype ``result_type(y, mask)``.

    Raises
    ------
    TypeError, ValueError
        As for :func:`shift_sum_adjoint`; also for an integer `y`.
    """
    return _call("shift_sum_pinv", y, step, channels, axis, channel_axis, mask, keepdims)
