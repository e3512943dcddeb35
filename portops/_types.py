"""The array type the public functions are generic in: a result has its input's type."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

__all__ = ["Array", "ArrayT"]


class Array(Protocol):
    """What every array library's arrays have (NumPy, CuPy, torch, JAX, Dask, ...)."""

    @property
    def shape(self) -> Any: ...

    @property
    def dtype(self) -> Any: ...


#: An array of any library; a function taking and returning ``ArrayT`` returns the
#: type it was given (``np.ndarray`` in, ``np.ndarray`` out; a tensor, a tensor).
ArrayT = TypeVar("ArrayT", bound=Array)
