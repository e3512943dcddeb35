"""NumPy's C entry points, called without their Python wrappers.

``numpy.einsum`` is a Python function that checks its keywords before it calls the C
loop ``c_einsum``; that check costs about 0.9 µs a call, more than the loop itself
takes on small operands.
"""

from __future__ import annotations

import numpy as np

__all__ = ["c_einsum"]

try:  # numpy.einsum's C loop itself
    from numpy._core.multiarray import c_einsum
except ImportError:  # pragma: no cover - a NumPy that moved it
    c_einsum = np.einsum
