"""shift_sum family in pure array API: no mutation, so it runs under ``jax.jit`` /
``jax.grad``, lazily on Dask, and on array-api-strict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import extend
from .._arrays import device_of
from .._dtypes import promote
from .._ops.shift_sum import ShiftSumArgs
from ..extend import Priority


def along(ndim: int, axis: int, item: Any) -> tuple[Any, ...]:
    """The index of `item` along `axis` of an `ndim`-dimensional array."""
    idx: list[Any] = [slice(None)] * ndim
    idx[axis] = item
    return tuple(idx)


def channel(a: Any, axis: int, c: int) -> Any:
    """Channel `c` of `a` along `axis`, keeping the axis (size-1 axes broadcast)."""
    return a if a.shape[axis] == 1 else a[along(a.ndim, axis, slice(c, c + 1))]


def pad_axis(xp: Any, z: Any, axis: int, before: int, after: int) -> Any:
    """`z` with `before` and `after` zeros along `axis` (by concatenation: no mutation)."""

    def zeros(n: int) -> list[Any]:
        shape = list(z.shape)
        shape[axis] = n
        return [xp.zeros(tuple(shape), dtype=z.dtype, device=device_of(z))] if n > 0 else []

    parts = [*zeros(before), z, *zeros(after)]
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=axis)


def forward(a: ShiftSumArgs) -> Any:
    """Sum of zero-padded channels: one padded term per channel."""
    x, offsets, ax, cax, mask, keepdims, xp = a[:7]
    out_dtype, acc = a.dtype, a.acc_dtype
    grow = max(offsets)
    total = None
    for c, o in enumerate(offsets):
        z = channel(x, cax, c)
        if mask is not None:
            z = z * channel(mask, cax, c)
        z = pad_axis(xp, xp.astype(z, acc, copy=False), ax, o, grow - o)
        total = z if total is None else total + z
    assert total is not None
    if not keepdims:
        total = xp.squeeze(total, axis=cax)
    # One unmasked channel at offset 0 in its own dtype: `total` is still x itself.
    return xp.astype(total, out_dtype, copy=len(offsets) == 1 and mask is None)


def conj_mask(xp: Any, mask: Any) -> Any:
    """The mask as it enters the adjoint: conjugated when complex."""
    return xp.conj(mask) if xp.isdtype(mask.dtype, "complex floating") else mask


def adjoint(a: ShiftSumArgs) -> Any:
    """Concatenate each channel's window of ``y``, then mask."""
    y, offsets, ax, cax, mask, _, xp = a[:7]
    width = a.shape[ax]
    x = xp.concat([y[along(y.ndim, ax, slice(o, o + width))] for o in offsets], axis=cax)
    if mask is not None:
        x = xp.astype(x * conj_mask(xp, mask), a.dtype, copy=False)
    return x


Kernel = Callable[[ShiftSumArgs], Any]


def overlap(a: ShiftSumArgs, forward_impl: Kernel = forward) -> Any:
    """``Phi = sum_c shift_c(|mask_c|^2)``, shaped to broadcast against ``y``."""
    y, offsets, ax, cax, mask, _, xp = a[:7]
    width = a.shape[ax]
    is_complex = xp.isdtype(y.dtype, "complex floating")
    real = xp.real(xp.empty((), dtype=y.dtype)).dtype if is_complex else y.dtype
    shape = [1] * y.ndim
    shape[cax], shape[ax] = len(offsets), width
    if mask is None:
        m2 = xp.ones(tuple(shape), dtype=real, device=device_of(y))
    else:
        # Squared in the result's precision: no integer overflow, and a float32 mask with
        # float64 y exact there.
        mask = xp.astype(mask, promote(xp, mask.dtype, real), copy=False)
        m2 = xp.abs(mask) ** 2 if xp.isdtype(mask.dtype, "complex floating") else mask * mask
        full = [t if s == 1 else s for s, t in zip(m2.shape, shape, strict=True)]
        m2 = xp.broadcast_to(m2, tuple(full))
    return forward_impl(ShiftSumArgs.make("forward", m2, offsets, ax, cax, None, True, xp))


def divide_where_positive(xp: Any, y: Any, phi: Any) -> Any:
    """``y / phi`` where ``phi > 0``, else 0, without dividing by zero."""
    positive = phi > 0
    return xp.where(positive, y / xp.where(positive, phi, xp.ones_like(phi)), xp.zeros_like(y))


def pinv(a: ShiftSumArgs, forward_impl: Kernel = forward, adjoint_impl: Kernel = adjoint) -> Any:
    """``A^H (y / Phi)``: exact because ``A A^H`` is diagonal."""
    xp = a.xp
    z = divide_where_positive(xp, a.array, overlap(a, forward_impl))
    if a.mask is None:
        z = xp.astype(z, a.array.dtype, copy=False)
    return adjoint_impl(a._replace(array=z))


GENERIC = "pure array API (reference; jax.jit/grad, lazy dask, array-api-strict)"
for _op, _fn in (("shift_sum", forward), ("shift_sum_adjoint", adjoint), ("shift_sum_pinv", pinv)):
    extend.register(
        _op, "generic", _fn, libraries=None, priority=Priority.REFERENCE, summary=GENERIC
    )
