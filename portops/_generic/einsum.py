"""einsum in pure array API: permute_dims, reshape, matmul, sum (no mutation), so it runs
under ``jax.jit``/``jax.grad``, lazily on Dask, on array-api-strict and on CuPy."""

from __future__ import annotations

from typing import Any

import array_api_compat as compat

from .. import extend
from .._arrays import device_of
from .._einsum.execute import ArrayAPIOps, cast, run
from .._ops.einsum import EinsumArgs
from .._tracing import memo
from ..extend import Priority


@memo(32)
def _ops(xp: Any) -> ArrayAPIOps:
    return ArrayAPIOps(xp)


def generic(a: EinsumArgs) -> Any:
    """Lower every step to the namespace's matmul / multiply."""
    sizes = a.lowering.sizes
    if 0 in sizes.values():  # every sum is empty: zeros (Dask cannot reshape empty chunks)
        shape = tuple(sizes[x] for x in a.lowering.equation.output)
        return a.xp.zeros(shape, dtype=a.dtype, device=device_of(a.operands[0]))
    ops = _ops(a.xp)
    result = run(a.plan, cast(a.operands, a.dtype, ops), ops, a.lowering.plan_for)
    return a.xp.asarray(result, copy=True) if a.may_alias else result  # never a view


def _applies(a: EinsumArgs) -> str | None:
    if a.operands and compat.is_torch_namespace(a.xp) and a.xp.isdtype(a.dtype, "integral"):
        if a.operands[0].device.type != "cpu":
            return "torch's CUDA matmul takes no integers (the torch implementation sums products)"
    return None


extend.register(
    "einsum",
    "generic",
    libraries=None,
    priority=Priority.REFERENCE,
    applies=_applies,
    summary="batched matmul lowering in pure array API (jax.jit/grad, lazy dask, any library)",
)(generic)
