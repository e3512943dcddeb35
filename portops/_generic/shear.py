"""shear / unshear in pure array API: no mutation, so they run under ``jax.jit`` /
``jax.grad``, lazily on Dask, and on array-api-strict."""

from __future__ import annotations

from typing import Any

import array_api_compat as compat

from .. import extend
from .._ops.shear import ShearArgs, growth
from ..extend import Priority


def result_dtype(a: ShearArgs) -> Any:
    """``result_type(array, mask)``."""
    if a.mask is None:
        return a.array.dtype
    return a.xp.result_type(a.array.dtype, a.mask.dtype)


def _take(a: Any, axis: int, start: int, stop: int) -> Any:
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(start, stop)
    return a[tuple(idx)]


def _pad(xp: Any, z: Any, axis: int, before: int, after: int) -> Any:
    parts = []
    for n in (before, None, after):
        if n is None:
            parts.append(z)
        elif n > 0:
            shape = list(z.shape)
            shape[axis] = n
            parts.append(xp.zeros(tuple(shape), dtype=z.dtype, device=compat.device(z)))
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=axis)


def conj_mask(xp: Any, mask: Any) -> Any:
    """The mask as it enters the adjoint: conjugated when complex."""
    if xp.isdtype(mask.dtype, "complex floating"):
        return xp.conj(mask)
    return mask


def shear(a: ShearArgs) -> Any:
    """Each channel zero-padded to its place, then the channels concatenated."""
    x, offsets, fractions, ax, cax, mask, xp = a
    z = x if mask is None else xp.astype(x * mask, result_dtype(a), copy=False)
    z = xp.broadcast_to(z, tuple(x.shape))
    grow = growth(offsets, fractions)
    parts = []
    for c, n in enumerate(offsets):
        zc = _take(z, cax, c, c + 1)
        f = 0.0 if fractions is None else fractions[c]
        if f == 0:
            parts.append(_pad(xp, zc, ax, n, grow - n))
        else:  # linear interpolation between the two pixels it falls between
            parts.append(
                _pad(xp, zc * (1 - f), ax, n, grow - n) + _pad(xp, zc * f, ax, n + 1, grow - n - 1)
            )
    return xp.concat(parts, axis=cax)


def unshear(a: ShearArgs) -> Any:
    """Each channel's window, concatenated, then masked."""
    y, offsets, fractions, ax, cax, mask, xp = a
    width = y.shape[ax] - growth(offsets, fractions)
    parts = []
    for c, n in enumerate(offsets):
        yc = _take(y, cax, c, c + 1)
        window = _take(yc, ax, n, n + width)
        f = 0.0 if fractions is None else fractions[c]
        if f != 0:
            window = window * (1 - f) + _take(yc, ax, n + 1, n + 1 + width) * f
        parts.append(window)
    x = xp.concat(parts, axis=cax)
    if mask is not None:
        x = xp.astype(x * conj_mask(xp, mask), result_dtype(a), copy=False)
    return x


_GENERIC = "pure array API (reference; jax.jit/grad, lazy dask, array-api-strict)"
extend.register(
    "shear", "generic", shear, libraries=None, priority=Priority.REFERENCE, summary=_GENERIC
)
extend.register(
    "unshear", "generic", unshear, libraries=None, priority=Priority.REFERENCE, summary=_GENERIC
)
