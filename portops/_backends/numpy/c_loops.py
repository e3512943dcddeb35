"""NumPy's C entry points without their Python wrappers: ``numpy.einsum`` checks its
keywords (about 0.9 µs a call, more than the loop takes on small operands) before it
calls the C loop ``c_einsum``."""

import numpy as np

__all__ = ["c_einsum"]

try:
    from numpy._core.multiarray import c_einsum
except ImportError:  # pragma: no cover - a NumPy that moved it
    c_einsum = np.einsum
