"""NumPy specialisations; importing this package registers them (each module registers
the implementations it defines)."""

from . import einsum, shear, shift_sum, vecdot

__all__ = ["einsum", "shear", "shift_sum", "vecdot"]
