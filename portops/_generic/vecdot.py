"""vecdot in pure array API: a product and a sum, so it runs under ``jax.jit`` /
``jax.grad``, lazily on Dask, and on array-api-strict."""

from __future__ import annotations

from typing import Any

from .. import extend
from .._ops.vecdot import VecdotArgs
from ..extend import Priority


def vecdot(a: VecdotArgs) -> Any:
    """``sum(conj(x1) * x2)`` in float32 or wider, cast to ``result_type(x1, x2)``."""
    xp, acc = a.xp, a.acc_dtype
    x1, x2 = (xp.astype(x, acc, copy=False) for x in (a.x1, a.x2))
    if xp.isdtype(acc, "complex floating"):
        x1 = xp.conj(x1)
    # dtype= keeps small integers from being promoted to the default integer dtype.
    total = xp.sum(x1 * x2, axis=a.axis, keepdims=a.keepdims, dtype=acc)
    return xp.astype(total, a.dtype, copy=False)


extend.register(
    "vecdot",
    "generic",
    libraries=None,
    priority=Priority.REFERENCE,
    summary="pure array API product and sum (reference; jax.jit/grad, lazy dask, array-api-strict)",
)(vecdot)
