"""The compiled row loop of the CPU shift_sum forward (``shift_rows.c``), loaded with
ctypes where the optional extension was built (ctypes releases the GIL in each call).
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import cache
from typing import Any

import numpy as np


@cache
def row_loops() -> dict[np.dtype, Any] | None:
    """{NumPy dtype: C function} (native byte order only), or None where the extension was
    not built (no compiler at install time, or the sources run in place)."""
    spec = importlib.util.find_spec("portops._kernels._shift_rows")
    if spec is None or spec.origin is None:
        return None
    library, loops = ctypes.CDLL(spec.origin), {}
    for bits in (32, 64):
        loop = loops[np.dtype(f"float{bits}")] = getattr(library, f"shift_rows_f{bits}")
        loop.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_ssize_t] * 9 + [ctypes.c_void_p]
        loop.restype = None
    return loops
