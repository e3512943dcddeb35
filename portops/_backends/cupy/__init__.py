"""CuPy specialisations; importing this package registers them (each module registers
the implementations it defines)."""

from . import shear, shift_sum, vecdot

__all__ = ["shear", "shift_sum", "vecdot"]
