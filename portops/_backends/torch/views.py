"""Zero-copy NumPy views of CPU tensors, for the torch code that runs NumPy's kernels."""

import numpy as np
import torch


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy array sharing `t`'s memory: detached (callers record no gradient); a lazy
    conjugate or negative view is made real first (a copy, the only case with one)."""
    try:
        return t.numpy()
    except RuntimeError:  # requires grad, or a lazy conjugate/negative view
        return t.detach().resolve_conj().resolve_neg().numpy()
