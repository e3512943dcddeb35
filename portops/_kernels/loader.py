"""CUDA C sources of ``portops/_kernels`` and their template instance names (imports
no GPU library, so tests can compile them with ``nvcc`` anywhere).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["CTYPES", "kernel_name", "kernel_source", "real_of"]

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
