"""The kernels of ``portops/_kernels``: the CUDA C sources and their template instance
names (imports no GPU library, so tests can compile them with ``nvcc`` anywhere), and the
CPU shift_sum forward's row loop (``shift_rows.c``), loaded with ctypes where the optional
extension was built (ctypes releases the GIL in each call).
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

__all__ = ["CTYPES", "kernel_name", "kernel_source", "real_of", "row_loops"]

# NumPy dtype name -> C type in shift_sum.cu.
CTYPES: dict[str, str] = {
    "float16": "__half", "float32": "float", "float64": "double",
    "complex64": "portops::c64", "complex128": "portops::c128",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long",
}  # fmt: skip


def real_of(dtype: str) -> str:
    """Real accumulation type for ``|v|^2`` of `dtype` (float32 for half precision)."""
    return {"complex64": "float32", "complex128": "float64", "float16": "float32"}.get(dtype, dtype)


@cache
def kernel_source(name: str = "shift_sum.cu") -> str:
    """Text of ``portops/_kernels/<name>``."""
    return (resources.files("portops") / "_kernels" / name).read_text(encoding="utf-8")


def kernel_name(
    kernel: str, dtypes: tuple[str, ...], large: bool, constants: tuple[int, ...] = ()
) -> str:
    """Template id of a kernel instance; `constants`: trailing integer template arguments."""
    args = [CTYPES[d] for d in dtypes] + ["long long" if large else "int"]
    args += [str(c) for c in constants]
    return f"portops::{kernel}<{', '.join(args)}>"


@cache
def row_loops() -> dict[np.dtype, Any] | None:
    """{NumPy dtype: C function} (native byte order only), or None where the extension was
    not built (no compiler at install time, or the sources run in place)."""
    spec = importlib.util.find_spec("portops._kernels._shift_rows")
    if spec is None or spec.origin is None:
        return None
    library, loops = ctypes.CDLL(spec.origin), {}
    pointer, size = ctypes.c_void_p, ctypes.c_ssize_t  # (the mask's: NULL, NULL, 0 without)
    for bits in (32, 64):
        loop = loops[np.dtype(f"float{bits}")] = getattr(library, f"shift_rows_f{bits}")
        loop.argtypes = [pointer] * 2 + [size] * 9 + [pointer] * 3 + [size]
        loop.restype = None
    return loops
