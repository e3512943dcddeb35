"""Zero-copy NumPy views of CPU tensors, for the torch code that runs NumPy's kernels."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["numpy_view"]


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy array sharing the memory of CPU tensor `t`.

    A tensor that requires grad is detached (the callers record no gradient), and a
    lazy conjugate or negative view is made real first (a copy, the only case with one).
    """
    try:
        return t.numpy()
    except RuntimeError:  # requires grad, or a lazy conjugate/negative view
        return t.detach().resolve_conj().resolve_neg().numpy()
