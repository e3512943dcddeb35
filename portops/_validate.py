"""Argument checks shared by every operation, with messages reading
``"<name> must be <what is accepted>, got <what came>"``; integers as NumPy reads axes.
"""

from __future__ import annotations

import math
import operator
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from . import _machine

__all__ = [
    "FLOATING", "axis", "axis_pair", "check_dtype", "check_fits", "dims", "flag", "has_dtype",
    "integer", "integers", "positive_int", "setting"
]  # fmt: skip


def integer(value: Any, name: str, what: str = "an integer", must: str = "be") -> int:
    """`value` as an int (by :func:`operator.index`); bool and non-integers raise
    (`what`: what is accepted, for the message)."""
    if type(value) is int:  # the common case, without a function call
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must {must} {what}, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must {must} {what}, got {type(value).__name__}") from None


def integers(values: Iterable[Any], name: str) -> list[int]:
    """Each item of `values` as an int, or a TypeError: ``"<name> must contain integers,
    got <type>"``."""
    return [integer(v, name, "integers", "contain") for v in values]


def positive_int(value: Any, name: str, what: str = "a positive integer") -> int:
    """`value` as an int >= 1, or a TypeError/ValueError naming `name`."""
    n = integer(value, name, what)
    if n < 1:
        raise ValueError(f"{name} must be {what}, got {n}")
    return n


def dims(values: Iterable[Any], name: str) -> tuple[int, ...]:
    """A shape: each item of `values` an int >= 1, or a TypeError/ValueError naming `name`."""
    return tuple(positive_int(v, name, "a sequence of positive integers") for v in values)


def axis(value: Any, ndim: int, name: str = "axis", of: str = "an array") -> int:
    """`value` as an axis of `of` with `ndim` dimensions, in ``[0, ndim)``."""
    ax = integer(value, name)
    if not -ndim <= ax < ndim:
        raise ValueError(f"{name}={value} is out of range for {of} with {ndim} dimensions")
    return ax % ndim


def axis_pair(axis_: Any, channel_axis: Any, ndim: int, of: str = "an array") -> tuple[int, int]:
    """The shifted axis and the channel axis of the shift_sum family, two distinct axes."""
    ax = axis(axis_, ndim, "axis", of)
    cax = axis(channel_axis, ndim, "channel_axis", of)
    if ax == cax:
        raise ValueError(f"axis={axis_} and channel_axis={channel_axis} name the same axis")
    return ax, cax


def flag(value: Any, name: str) -> bool:
    """`value` as a bool: a bool, a NumPy bool or the integer 0 or 1; else a TypeError
    naming `name` (a string such as ``"no"`` or None would otherwise pass by truth)."""
    if type(value) is bool or isinstance(value, np.bool_):
        return bool(value)
    with suppress(TypeError):
        if operator.index(value) in (0, 1):
            return bool(value)
    got = repr(value) if isinstance(value, (str, int, float)) or value is None else None
    raise TypeError(f"{name} must be a bool, got {got or type(value).__name__}")


_KINDS = {"real floating": "f", "complex floating": "c", "integral": "iu", "bool": "b"}
_LETTERS: dict[tuple[str, ...], str] = {}


def has_dtype(xp: Any, dtype: Any, kinds: tuple[str, ...]) -> bool:
    """``xp.isdtype(dtype, kinds)``; NumPy dtypes by kind letter (faster, and keeps out
    datetime64/timedelta64, which NumPy counts as integers)."""
    if isinstance(dtype, np.dtype) and dtype.kind != "V":  # "V": bfloat16 and such
        letters = _LETTERS.get(kinds)
        if letters is None:
            letters = _LETTERS[kinds] = "".join(_KINDS[k] for k in kinds)
        return dtype.kind in letters
    return bool(xp.isdtype(dtype, kinds))


_NUMERIC = ("real floating", "complex floating", "integral")
FLOATING = ("real floating", "complex floating")


def check_dtype(xp: Any, a: Any, name: str, *, floating_only: bool = False) -> None:
    """Raise a TypeError naming `name` unless `a` has a numeric (integer, real or
    complex floating; not bool) or, with `floating_only`, a floating dtype."""
    # No cache keyed by dtype: torch.compile cannot compare torch and NumPy dtype keys.
    if not has_dtype(xp, a.dtype, FLOATING if floating_only else _NUMERIC):
        kind = "floating-point dtype" if floating_only else "numeric dtype (integer or floating)"
        raise TypeError(f"{name} must have a {kind}, got {a.dtype}")


def _size(nbytes: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} bytes"


def check_fits(
    shape: Sequence[int],
    itemsize: int,
    cause: str | tuple[str, Any],
    library: str,
    what: str = "a result",
) -> None:
    """Raise ValueError naming `cause` when an array of `shape` would not fit in memory."""
    nbytes = math.prod(shape) * itemsize
    memory = sys.maxsize if library == "dask" else _machine.current().memory
    if nbytes > memory:
        if not isinstance(cause, str):
            cause = f"{cause[0]}={cause[1]!r}"
        limit = "any array can hold" if library == "dask" else "this machine's memory"
        raise ValueError(
            f"{cause} asks for {what} of shape {tuple(shape)}: {_size(nbytes)}, more than "
            f"{limit} ({_size(memory)})"
        )


def setting(name: str, default: Any, what: str, parse: Any = int, minimum: float = 0) -> Any:
    """Environment variable `name` read by `parse`; `default` when unset or (warning) malformed."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    with suppress(ValueError):
        value = parse(raw)
        if math.isfinite(value) and value >= minimum:
            return value
    warnings.warn(
        f"{name}={raw!r} is not {what}; ignoring it and using the default", RuntimeWarning, 3
    )
    return default
