"""numpy.einsum's keywords (``dtype``, ``casting``, ``order``, ``out``) with NumPy's
meaning, and Python numbers and sequences as operands, for every library."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat as compat
import numpy as np

from .._arrays import JAX, NUMPY, TORCH, library_of, namespace_of

__all__ = ["as_arrays", "check_cast", "check_keywords", "numpy_dtype", "write_out", "with_order"]

_PYTHON_VALUES = frozenset({int, float, complex, bool, list, tuple})
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def numpy_dtype(d: Any) -> np.dtype[Any] | None:
    """The NumPy dtype of the same name as `d` (any library's dtype), or None."""
    if isinstance(d, np.dtype):
        return d
    try:
        return np.dtype(str(d).rsplit(".", 1)[-1])
    except TypeError:
        return None  # a dtype NumPy lacks (bfloat16, ...)


def check_keywords(casting: Any, order: Any, dtype: Any) -> tuple[str, str, np.dtype[Any] | None]:
    """`casting`, `order` (upper case) and `dtype` (a NumPy dtype, from anything
    ``numpy.dtype`` takes or a library's dtype), checked."""
    if casting not in CASTINGS:
        raise ValueError(f"einsum: casting must be one of {CASTINGS}, got {casting!r}")
    if not isinstance(order, str) or order.upper() not in ("K", "A", "C", "F"):
        raise ValueError(f"einsum: order must be one of 'K', 'A', 'C', 'F', got {order!r}")
    if dtype is None or isinstance(dtype, np.dtype):
        return str(casting), order.upper(), dtype
    found = numpy_dtype(dtype) if not isinstance(dtype, (str, type)) else None
    if found is None:
        try:
            found = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"einsum: dtype must be a data type, got {dtype!r}") from None
    return str(casting), order.upper(), found


def check_cast(what: str, src: Any, dst: Any, casting: Any) -> None:
    """NumPy's casting rule between dtypes of any library (one NumPy lacks passes)."""
    src, dst = numpy_dtype(src), numpy_dtype(dst)
    if src is not None and dst is not None and not np.can_cast(src, dst, casting):
        raise TypeError(
            f"einsum: cannot cast {what} from {src} to {dst} under casting={casting!r} "
            "(pass casting='unsafe' to allow it)"
        )


def check_operand_casts(dtypes: Sequence[Any], dtype: np.dtype[Any], casting: Any) -> None:
    """NumPy's rule for ``dtype=``: every operand must cast to it under `casting`."""
    for k, d in enumerate(dtypes):
        check_cast(f"operand {k}", d, dtype, casting)


def as_arrays(operands: tuple[Any, ...]) -> tuple[Any, ...]:
    """Operands with Python numbers and sequences made arrays of the operands' library
    (NumPy's dtypes, as in ``numpy.einsum``), or NumPy arrays when none is an array."""
    arrays = [type(a) not in _PYTHON_VALUES and library_of(a) is not None for a in operands]
    if all(arrays):
        return operands
    like = next((a for a, is_array in zip(operands, arrays, strict=True) if is_array), None)
    converted = []
    for k, (a, is_array) in enumerate(zip(operands, arrays, strict=True)):
        if is_array:
            converted.append(a)
            continue
        try:
            value = np.asarray(a)
        except Exception as exc:
            raise TypeError(
                f"einsum: operand {k} must be an array, a number or a sequence of numbers, "
                f"got {type(a).__name__} ({exc})"
            ) from None
        if value.dtype.kind not in "biufc":  # None, strings, other objects
            raise TypeError(
                f"einsum: operand {k} must be an array, a number or a sequence of "
                f"numbers, got {type(a).__name__}"
            )
        converted.append(value if like is None else _to_library(value, like))
    return tuple(converted)


def _to_library(value: np.ndarray, like: Any) -> Any:
    """A NumPy array as an array of `like`'s library, on its device."""
    if library_of(like) == NUMPY:
        return value
    xp = namespace_of(like)
    if library_of(like) == TORCH:
        import torch

        value = value if value.flags.c_contiguous else value.copy()  # keeps 0-d as 0-d
        return torch.from_numpy(value).to(like.device)
    try:
        return xp.asarray(value, device=compat.device(like))
    except TypeError:
        return xp.asarray(value)


def with_order(result: Any, order: str, library: str, operands: Sequence[Any]) -> Any:
    """`result` laid out as `order` asks (NumPy and torch; others keep their layout); a
    0-d NumPy array as a NumPy scalar, as numpy.einsum returns."""
    if order == "K" or library not in (NUMPY, TORCH) or result.ndim < 2:
        if library == NUMPY and result.ndim == 0 and isinstance(result, np.ndarray):
            return result[()]
        return result
    if order == "A":
        fortran = all(_f_contiguous(a, library) for a in operands if a.ndim >= 2)
        order = "F" if fortran and any(a.ndim >= 2 for a in operands) else "C"
    if library == NUMPY:
        return np.asfortranarray(result) if order == "F" else np.ascontiguousarray(result)
    if order == "C":
        return result.contiguous()
    rev = tuple(range(result.ndim - 1, -1, -1))
    return result.permute(rev).contiguous().permute(rev)


def _f_contiguous(a: Any, library: str) -> bool:
    if library == NUMPY:
        return bool(a.flags.f_contiguous)
    expected = 1
    for n, st in zip(a.shape, a.stride(), strict=True):
        if n != 1 and st != expected:
            return False
        expected *= n
    return True


def write_out(result: Any, out: Any, library: str, casting: Any) -> Any:
    """Write `result` into `out` in place (NumPy's rules on shape and casting); return out."""
    out_library = library_of(out)
    if out_library is None:
        raise TypeError(f"einsum: out must be an array, got {type(out).__name__}")
    if out_library != library:
        raise TypeError(
            f"einsum: out is a {out_library} array but the operands are {library} arrays; "
            "out must come from the operands' library"
        )
    if library == JAX:
        raise TypeError(
            "einsum: out= cannot be written: JAX arrays are immutable; use the returned array"
        )
    shape = tuple(result.shape)
    if tuple(out.shape) != shape:
        raise ValueError(f"einsum: out has shape {tuple(out.shape)} but the result has {shape}")
    if casting is not None:  # None: checked already
        check_cast("the result", result.dtype, out.dtype, casting)
    if library == NUMPY:
        np.copyto(out, result, casting="unsafe")
    elif library == TORCH:
        out.copy_(result)
    else:
        xp = namespace_of(out)
        out[...] = result if result.dtype == out.dtype else xp.astype(result, out.dtype)
    return out
