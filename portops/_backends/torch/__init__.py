"""PyTorch specialisations; importing this package registers them (each module registers
the implementations it defines; the ``_triton_*`` kernels are imported on first use)."""

from . import einsum, shear, shift_sum, vecdot, vecdot_cuda

__all__ = ["einsum", "shear", "shift_sum", "vecdot", "vecdot_cuda"]
