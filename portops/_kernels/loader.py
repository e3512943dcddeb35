"""CUDA C sources of ``portops/_kernels`` and the template instances the loaders use.

Imports no GPU library: the CuPy backend builds its modules from these names, and the
test suite compiles the same instances with ``nvcc`` on machines without a GPU.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["CTYPES", "kernel_name", "kernel_source", "real_of", "shift_sum_instances"]

# NumPy dtype name -> C type in shift_sum.cu.
CTYPES: dict[str, str] = {
    "float16": "__half",
    "float32": "float",
    "float64": "double",
    "complex64": "portops::c64",
    "complex128": "portops::c128",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
}

_REAL = {"complex64": "float32", "complex128": "float64", "float16": "float32"}


def real_of(dtype: str) -> str:
    """Real accumulation type for ``|v|^2`` of `dtype` (float32 for half precision)."""
    return _REAL.get(dtype, dtype)


@cache
def kernel_source(name: str = "shift_sum.cu") -> str:
    """Text of ``portops/_kernels/<name>``."""
    return (resources.files("portops") / "_kernels" / name).read_text(encoding="utf-8")


def kernel_name(
    kernel: str, dtypes: tuple[str, ...], large: bool, constants: tuple[int, ...] = ()
) -> str:
    """Template id of a kernel instance, e.g. ``portops::shift_sum_forward<float, ...>``.

    `constants` are the kernel's trailing integer template arguments (the row kernels'
    channel count, 0 for one read at run time).
    """
    args = [CTYPES[d] for d in dtypes] + ["long long" if large else "int"]
    args += [str(c) for c in constants]
    return f"portops::{kernel}<{', '.join(args)}>"


def shift_sum_instances() -> list[str]:
    """A representative set of instances: every element type in every role once.

    The compile test instantiates these with ``nvcc``; the CuPy loader instantiates
    whichever the arguments need through NVRTC.
    """
    names = []
    for dt in CTYPES:
        acc = "float32" if dt == "float16" else dt
        for large in (False, True):
            names.append(kernel_name("shift_sum_forward", (dt, dt, acc, dt), large))
            names.append(kernel_name("shift_sum_adjoint", (dt, dt, acc, dt), large))
    for dt in CTYPES:
        acc = "float32" if dt == "float16" else dt
        for large in (False, True):
            for channels in (0, 28):
                forward = (dt, dt, acc, dt)
                names.append(kernel_name("shift_sum_forward_rows", forward, large, (channels,)))
                rows = (dt, dt, real_of(acc), acc, dt)
                names.append(kernel_name("shift_sum_adjoint_rows", rows, large, (channels,)))
            if "int" not in dt:
                names.append(kernel_name("shift_sum_inverse_phi_rows", (dt, real_of(dt)), large))
    for x, m, out in [
        ("float16", "float32", "float32"),
        ("float32", "complex64", "complex64"),
        ("complex64", "float32", "complex64"),
        ("complex128", "complex64", "complex128"),
        ("int64", "float64", "float64"),
        ("int32", "float32", "float64"),
    ]:
        names.append(kernel_name("shift_sum_forward", (x, m, out, out), False))
        names.append(kernel_name("shift_sum_adjoint", (x, m, out, out), False))
    for y, m in [
        ("float16", "float16"),
        ("float32", "float32"),
        ("float64", "float64"),
        ("complex64", "float32"),
        ("complex128", "complex128"),
        ("float32", "complex64"),
    ]:
        out = {"float16": "float32"}.get(y, y)
        if "complex" in m and "complex" not in out:
            out = "complex64"
        for large in (False, True):
            names.append(kernel_name("shift_sum_pinv_divide", (y, m, real_of(out), out), large))
    return names
