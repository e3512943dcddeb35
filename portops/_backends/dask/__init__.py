"""Dask specialisations: blockwise calls into the per-block library's implementation.
Importing this package registers them."""

from . import operands, shear, shift_sum

__all__ = ["operands", "shear", "shift_sum"]
