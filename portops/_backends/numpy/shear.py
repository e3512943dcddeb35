"""NumPy shear / unshear: cache-sized blocks (:mod:`portops._shear.blocked`) shared out
to portops' threads, one per ``thread_grain`` bytes moved."""

from __future__ import annotations

import functools
import math
from typing import Any, cast

import numpy as np

from ... import _threads, extend
from ..._ops.shear import ShearArgs
from ..._shear import blocked
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority

__all__ = ["runner", "threads"]


def threads(a: ShearArgs) -> int:
    """Threads a call uses: one per ``thread_grain`` bytes read and written."""
    moved = (math.prod(a.array.shape) + math.prod(a.shape)) * int(a.dtype.itemsize)
    return _threads.workers(moved, NUMPY["thread_grain"])


def runner(a: ShearArgs) -> blocked.Run:
    """Spread blocks over :func:`threads` of portops' threads."""
    return functools.partial(_threads.run_units, workers=threads(a))


def _plan(kernel: Any, a: ShearArgs) -> Any:
    mask = a.mask
    shape, dtype = (None, None) if mask is None else (mask.shape, mask.dtype)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def run(arr: Any, m: Any) -> np.ndarray:
        if m is not None:  # cast from bool and reshaped, as validation did
            m = m.astype(dtype, copy=False).reshape(shape)
        b = template._replace(array=np.asarray(arr), mask=m)
        return cast("np.ndarray", kernel(b, runner(b)))

    return run


def _choice(why: str, a: ShearArgs) -> tuple[str, str]:
    return "blocked", why


for _op, _kernel, _summary, _why in (
    (
        "shear",
        blocked.shear,
        "cache-sized blocks: zeroed, windows copied in (mask fused), over threads",
        "each block of the cube written while in the cache",
    ),
    (
        "unshear",
        blocked.unshear,
        "cache-sized blocks, each one strided copy per channel group, over threads",
        "each block of x copied from its windows' strided view",
    ),
):
    extend.register(
        _op,
        "numpy_blocked",
        libraries=["numpy"],
        priority=Priority.SPECIALIZED,
        summary=_summary,
        strategies=Strategies(
            [Strategy("blocked", _summary, functools.partial(_plan, _kernel), threads=threads)],
            choose=functools.partial(_choice, _why),
        ),
    )
