"""NumPy shear / unshear: one cache-sized block of the result at a time, over threads.

See :mod:`portops._shear.blocked`: each block of the sheared cube is zeroed and its
windows copied in while it is in the core's cache, so the cube goes to memory once.
Blocks are shared out to portops' thread pool (NumPy releases the GIL inside each
copy), one thread per ``thread_grain`` bytes moved.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ... import _buffers as buffers
from ... import _threads, extend
from ..._ops.shear import ShearArgs
from ..._shear import blocked
from ..._strategy import Strategies, Strategy
from ..._tables import NUMPY
from ...extend import Priority
from .shift_sum import run_units

__all__ = ["runner", "threads"]


def _moved(a: ShearArgs) -> int:
    """Bytes a call moves: its input read, its result written (of any library)."""
    item = int(a.dtype.itemsize)
    return (math.prod(a.array.shape) + math.prod(a.shape)) * item


def threads(a: ShearArgs) -> int:
    """Threads a call uses: one per ``thread_grain`` bytes moved."""
    return _threads.workers(_moved(a), NUMPY["thread_grain"])


def runner(nbytes: int) -> blocked.Run:
    """Spread blocks over portops' threads, one per ``thread_grain`` of `nbytes` moved."""
    workers = _threads.workers(nbytes, NUMPY["thread_grain"])
    return functools.partial(run_units, workers=workers)


def _plan(kernel: Any, a: ShearArgs) -> Any:
    mask = a.mask
    shape, dtype = (None, None) if mask is None else (mask.shape, mask.dtype)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def run(arr: Any, m: Any) -> np.ndarray:
        if m is not None:  # cast from bool and reshaped, as validation did
            m = m.astype(dtype, copy=False).reshape(shape)
        b = template._replace(array=np.asarray(arr), mask=m)
        out: np.ndarray = kernel(np, buffers.empty, b, runner(_moved(b)))
        return out

    return run


_SHEAR = Strategies(
    [
        Strategy(
            "blocked",
            "cache-sized blocks: zeroed, windows copied in (mask fused), over threads",
            lambda a: _plan(blocked.shear, a),
            threads=threads,
        )
    ],
    choose=lambda a: ("blocked", "each block of the cube written while in the cache"),
)
_UNSHEAR = Strategies(
    [
        Strategy(
            "blocked",
            "cache-sized blocks, each one strided copy per channel group, over threads",
            lambda a: _plan(blocked.unshear, a),
            threads=threads,
        )
    ],
    choose=lambda a: ("blocked", "each block of x copied from its windows' strided view"),
)

extend.register(
    "shear",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-sized blocks: zeroed, windows copied in (mask fused), over threads",
    strategies=_SHEAR,
)
extend.register(
    "unshear",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-sized blocks, each one strided copy per channel group, over threads",
    strategies=_UNSHEAR,
)
