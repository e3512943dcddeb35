"""Zero-copy NumPy views of CPU tensors, for the torch code that runs NumPy's kernels."""

import numpy as np
import torch

# Dtypes NumPy shares with torch at full precision: their CPU tensors have zero-copy views
# (half precision, bfloat16 and unsigned integers past 8 bits have none).
NUMPY_FLOATING = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})
NUMPY_DTYPES = NUMPY_FLOATING | {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy array sharing `t`'s memory: detached (callers record no gradient); a lazy
    conjugate or negative view is made real first (a copy, the only case with one)."""
    try:
        return t.numpy()
    except RuntimeError:  # requires grad, or a lazy conjugate/negative view
        return t.detach().resolve_conj().resolve_neg().numpy()
