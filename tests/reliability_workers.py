"""Work done in child processes by tests/test_reliability.py (importable by spawn).

Every result here is large enough for the result-buffer cache (4 MiB of float32) and
holds one known value, so a check reads every element and knows what it must be.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import portops

Y_SHAPE = (256, 1027)  # adjoint with step 1 and 4 channels: (4, 256, 1024), 4 MiB
X_SHAPE = (4, 256, 1024)


def constant_result(value: float, library: str = "numpy") -> Any:
    """A cached-size shift_sum_adjoint result whose every element is `value`."""
    y = np.full(Y_SHAPE, value, dtype=np.float32)
    if library == "torch":
        import torch

        y = torch.from_numpy(y)
    return portops.shift_sum_adjoint(y, 1, channels=4)


def holds(result: Any, value: float) -> bool:
    """Whether `result` has the expected shape and every element equals `value`."""
    a = result.numpy() if hasattr(result, "numpy") else np.asarray(result)
    return a.shape == X_SHAPE and bool(np.all(a == value))


def compute_and_check(value: float) -> tuple[int, int]:
    """In a worker: two results, each checked after the other was made.

    Returns (results checked, results corrupted).
    """
    first = constant_result(value)
    second = constant_result(value + 0.5)
    bad = (not holds(first, value)) + (not holds(second, value + 0.5))
    del first
    third = constant_result(value + 0.25)  # reuses the buffer `first` freed
    bad += (not holds(second, value + 0.5)) + (not holds(third, value + 0.25))
    return 4, bad


class ConstantResults:
    """A map-style dataset for torch's DataLoader.

    Item i is a torch result of value i, and whether another result the worker made
    after it held its value.
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        out = constant_result(float(i), "torch")
        # A second call in the worker, into another (or the reused) buffer.
        spare = constant_result(float(-i), "torch")
        return out, holds(spare, float(-i))
