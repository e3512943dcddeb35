"""CuPy specialisations; importing this package registers them."""

from . import shear, shift_sum, vecdot

__all__ = ["shear", "shift_sum", "vecdot"]
