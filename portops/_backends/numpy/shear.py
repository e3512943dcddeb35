"""NumPy shear / unshear: one cache-sized block of the result at a time, over threads.

See :mod:`portops._shear.blocked`: each block of the sheared cube is zeroed and its
windows copied in while it is in the core's cache, so the cube goes to memory once.
Blocks are shared out to portops' thread pool (NumPy releases the GIL inside each
copy) when the array is large.
"""

from __future__ import annotations

import functools

import numpy as np

from ... import _buffers as buffers
from ... import extend
from ..._ops.shear import ShearArgs
from ..._shear import blocked
from ...extend import Priority
from .shift_sum import _run

# Below this many elements of the result one thread is faster (hand-over costs).
_THREADED = 1 << 21


def runner(size: int) -> blocked.Run:
    """Spread blocks over portops' threads for arrays of `size` elements or more."""
    return functools.partial(_run, threaded=size >= _THREADED)


def shear(a: ShearArgs) -> np.ndarray:
    """Each block of the cube zeroed, then its windows copied in (mask fused)."""
    a = a._replace(array=np.asarray(a.array))
    out: np.ndarray = blocked.shear(np, buffers.empty, a, runner(a.array.size))
    return out


def unshear(a: ShearArgs) -> np.ndarray:
    """Each block of ``x`` copied from the strided view of its windows (mask fused)."""
    a = a._replace(array=np.asarray(a.array))
    out: np.ndarray = blocked.unshear(np, buffers.empty, a, runner(a.array.size))
    return out


extend.register(
    "shear",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-sized blocks: zeroed, windows copied in (mask fused), over threads",
)(shear)
extend.register(
    "unshear",
    "numpy_blocked",
    libraries=["numpy"],
    priority=Priority.SPECIALIZED,
    summary="cache-sized blocks, each one strided copy per channel group, over threads",
)(unshear)
