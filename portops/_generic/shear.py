"""shear / unshear in pure array API: no mutation, so they run under ``jax.jit`` /
``jax.grad``, lazily on Dask, and on array-api-strict."""

from __future__ import annotations

from typing import Any

from .. import extend
from .._ops.shear import ShearArgs, growth
from .._shear.layout import take
from ..extend import Priority
from .shift_sum import GENERIC, conj_mask, pad_axis


def shear(a: ShearArgs) -> Any:
    """Each channel zero-padded to its place, then the channels concatenated."""
    x, offsets, fractions, ax, cax, mask, xp = a[:7]
    z = x if mask is None else xp.astype(x * mask, a.dtype, copy=False)
    z = xp.broadcast_to(z, tuple(x.shape))
    grow = growth(offsets, fractions)
    parts = []
    for c, n in enumerate(offsets):
        zc = take(z, cax, c, c + 1)
        f = 0.0 if fractions is None else fractions[c]
        part = pad_axis(xp, zc * (1 - f) if f else zc, ax, n, grow - n)
        if f:  # linear interpolation between the two pixels it falls between
            part = part + pad_axis(xp, zc * f, ax, n + 1, grow - n - 1)
        parts.append(part)
    return xp.concat(parts, axis=cax)


def unshear(a: ShearArgs) -> Any:
    """Each channel's window, concatenated, then masked."""
    y, offsets, fractions, ax, cax, mask, xp = a[:7]
    width = a.shape[ax]
    if fractions is not None and y.dtype != a.dtype:  # interpolate in the result's precision
        y = xp.astype(y, a.dtype)
    parts = []
    for c, n in enumerate(offsets):
        yc = take(y, cax, c, c + 1)
        window = take(yc, ax, n, n + width)
        f = 0.0 if fractions is None else fractions[c]
        if f != 0:
            window = window * (1 - f) + take(yc, ax, n + 1, n + 1 + width) * f
        parts.append(window)
    x = xp.concat(parts, axis=cax)
    if mask is not None:
        x = xp.astype(x * conj_mask(xp, mask), a.dtype, copy=False)
    return x


for _op, _fn in (("shear", shear), ("unshear", unshear)):
    extend.register(
        _op, "generic", _fn, libraries=None, priority=Priority.REFERENCE, summary=GENERIC
    )
