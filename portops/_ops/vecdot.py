"""The batched inner product: one dot product per vector along an axis. Validation
happens here, once; implementations receive a checked :class:`VecdotArgs`."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _dispatch
from .. import _validate as check
from .._arrays import inspect_operands
from .._dtypes import accumulation_dtype, promote
from .._plans import PlanCache
from .._plans import key as _key
from .._types import ArrayT

__all__ = ["VecdotArgs", "vecdot"]


class VecdotArgs(NamedTuple):
    """Normalised arguments shared by every vecdot implementation.

    ``axis`` is negative and valid for both ``x1`` and ``x2``; it indexes the
    broadcast shape as well, since it counts from the end. ``dtype`` is the result's
    (``result_type(x1, x2)``), ``shape`` its shape and ``acc_dtype`` the dtype the
    products are summed in (float32 for half precision), computed once by the front end.
    """

    x1: Any
    x2: Any
    axis: int
    keepdims: bool
    xp: Any
    dtype: Any
    shape: tuple[int, ...]
    acc_dtype: Any

    @classmethod
    def make(cls, x1: Any, x2: Any, axis: int, keepdims: bool, xp: Any) -> VecdotArgs:
        """The record of a call with a checked axis (a ValueError where x1 and x2 do not
        broadcast)."""
        dtype = x1.dtype if x1.dtype == x2.dtype else promote(xp, x1.dtype, x2.dtype)
        shape = list(_broadcast(tuple(x1.shape), tuple(x2.shape)))
        if keepdims:
            shape[axis] = 1
        else:
            del shape[axis]
        return cls(x1, x2, axis, keepdims, xp, dtype, tuple(shape), accumulation_dtype(xp, dtype))


def _known(n: Any) -> bool:
    return isinstance(n, int)  # dask arrays of unknown size have nan (or None) lengths


def _broadcast(s1: tuple[Any, ...], s2: tuple[Any, ...]) -> tuple[Any, ...]:
    """The broadcast of two shapes; Dask's unknown sizes (NaN or None) meet only 1 or
    each other (Dask cannot broadcast them against a known size)."""
    if s1 == s2:
        return s1
    n = max(len(s1), len(s2))
    out = []
    for a, b in zip((1,) * (n - len(s1)) + s1, (1,) * (n - len(s2)) + s2, strict=True):
        if a != b and a != 1 and b != 1 and _known(a) and _known(b):
            raise ValueError(f"x1 of shape {s1} and x2 of shape {s2} do not broadcast")
        if a != 1 and b != 1 and _known(a) != _known(b):
            name, shape = ("x2", s2) if _known(a) else ("x1", s1)
            raise ValueError(
                f"{name} has unknown sizes (shape {shape}) where the other's are known; "
                f"compute them first, for a Dask array with {name}.compute_chunk_sizes()"
            )
        out.append(b if a == 1 else a)
    return tuple(out)


def _normalize_axis(axis: Any, n1: int, n2: int) -> int:
    ax = check.integer(axis, "axis")
    if ax >= 0:
        if n1 != n2:
            raise ValueError(
                f"axis={axis} is ambiguous when x1 and x2 have different numbers of dimensions "
                f"({n1} and {n2}); pass a negative axis (counted from the last dimension)"
            )
        ax -= n1
    if not -min(n1, n2) <= ax <= -1:
        raise ValueError(
            f"axis={axis} is out of range for x1 and x2 with {n1} and {n2} dimensions; "
            f"it must be in [{-min(n1, n2)}, -1] (or [0, {n1}) when both have {n1})"
        )
    return ax


def _prepare(x1: Any, x2: Any, /, *, axis: int = -1, keepdims: bool = False) -> _dispatch.Call:
    if x1 is None or x2 is None:
        raise TypeError(f"{'x1' if x1 is None else 'x2'} must be an array, got None")
    lib, (x1, x2) = inspect_operands(("x1", "x2"), (x1, x2))
    xp = lib.xp
    s1, s2 = tuple(x1.shape), tuple(x2.shape)
    n1, n2 = len(s1), len(s2)
    if n1 == 0 or n2 == 0:
        raise ValueError(
            f"x1 and x2 must have at least one dimension, got {n1} and {n2} dimensions"
        )
    check.check_dtype(xp, x1, "x1")
    check.check_dtype(xp, x2, "x2")
    try:
        if x1.dtype != x2.dtype:
            promote(xp, x1.dtype, x2.dtype)
    except (TypeError, RuntimeError):  # torch raises RuntimeError (uint16 with int64)
        raise TypeError(
            f"x1 of dtype {x1.dtype} and x2 of dtype {x2.dtype} cannot be combined by "
            "this library's type promotion; cast one of them"
        ) from None
    ax = -1 if type(axis) is int and axis == -1 else _normalize_axis(axis, n1, n2)
    k1, k2 = s1[ax], s2[ax]
    if k1 != k2 and _known(k1) and _known(k2):
        raise ValueError(
            f"x1 and x2 must have the same length along axis {axis}, got {k1} and {k2} "
            f"(shapes {s1} and {s2})"
        )
    args = VecdotArgs.make(x1, x2, ax, check.flag(keepdims, "keepdims"), xp)
    if s1 != s2:  # broadcasting can make a result far larger than the inputs
        size = getattr(args.dtype, "itemsize", 8)
        check.check_fits(args.shape, size, "x1 and x2 broadcast together", lib.library)
    return _dispatch.Call(lib.library, lib.device, args)


_dispatch.define_operation("vecdot", _prepare, lambda a: (a.x1, a.x2))

PLANS = PlanCache("vecdot")
_lookup, _direct = PLANS._plans.get, PLANS.direct
_preferences, _prefer_active = _dispatch.current_preferences, _dispatch.preferences_active


def vecdot(x1: ArrayT, x2: ArrayT, /, *, axis: int = -1, keepdims: bool = False) -> ArrayT:
    """Dot product of the vectors along `axis`: ``sum(conj(x1) * x2, axis=axis)``.

    Follows the array API standard's ``vecdot``: the dimensions other than `axis`
    broadcast, and the first argument is conjugated for complex inputs.

    Parameters
    ----------
    x1, x2 : array
        Arrays of one library (NumPy, CuPy, PyTorch, JAX, Dask, array-api-strict, ...)
        on one device, with numeric dtypes; not modified. Their lengths along `axis`
        must be equal (the contracted axis does not broadcast), and their other
        dimensions must broadcast.
    axis : int, optional
        The contracted axis, counted from the last dimension when negative (default
        ``-1``); it must exist in both arrays. A non-negative axis is accepted only
        when `x1` and `x2` have the same number of dimensions.
    keepdims : bool, optional
        Keep the contracted axis with length 1 in the result.

    Returns
    -------
    array
        The broadcast shape of `x1` and `x2` without `axis` (or with length 1 there);
        dtype ``result_type(x1, x2)``; same library and device as the inputs.
        Half-precision inputs are multiplied and summed in float32; integer results
        wrap around like the inputs' dtype. PyTorch results carry gradients with
        respect to both inputs.

    Raises
    ------
    TypeError
        If `x1` or `x2` is not an array, they come from two libraries, a dtype is not
        numeric (for example bool), or `axis` is not an integer.
    ValueError
        If `axis` is out of range or ambiguous, the lengths along `axis` differ, the
        other dimensions do not broadcast, an input is 0-d, or the arrays are on two
        devices.

    See Also
    --------
    portops.explain : which implementation runs for given arguments, and why.

    Examples
    --------
    >>> import numpy as np, portops
    >>> portops.vecdot(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0]))
    array([3., 7.])
    >>> portops.vecdot(np.array([1j, 2]), np.array([1j, 1]))  # conj(x1) . x2
    array(3.+0.j)
    """
    key = None
    if type(axis) is int and type(keepdims) is bool:
        direct = _direct.get(type(x1))  # calls that skip the key: see Strategies' `direct`
        if direct is not None and axis == -1 and not keepdims and not _prefer_active():
            result: ArrayT | None = direct(x1, x2)
            if result is not None:
                return result
        key = _key((axis, keepdims), x1, x2)  # None while torch traces: checked first
        if key is not None and _preferences() is None:
            plan = _lookup(key)
            if plan is not None:
                return plan(x1, x2)  # type: ignore[no-any-return]
    return _dispatch.invoke_planned(  # type: ignore[no-any-return]
        "vecdot", PLANS, key, (x1, x2), x1, x2, axis=axis, keepdims=keepdims
    )
