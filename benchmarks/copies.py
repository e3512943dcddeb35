"""The copy behind the hardware limit: a copy of bytes between two preallocated buffers.

The limit of a memory-bound operation is the bytes it must read and write over the
machine's copy bandwidth, counted as (bytes read + bytes written) / time of a copy. The
copy is a candidate of the operation's comparison (``kind="copy"``), so it is timed in
the same rounds as the operation; the report takes the best copy of the run at that size
(a copy is only ever slowed down by what else runs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.interleave import Candidate


@functools.cache  # one pair of buffers per size, shared by every comparison of that size
def _buffers(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    src = np.ones(max(1, nbytes // 4), dtype=np.float32)
    return src, np.ones_like(src)  # both written once: no page faults in the rounds


def copy_fn(nbytes: int, device: str = "cpu") -> Callable[[], Any]:
    """A copy of `nbytes` bytes: torch's ``copy_`` (on its threads) where torch is
    installed, else ``np.copyto`` (one thread); on a CUDA device, a device copy."""
    try:
        import torch
    except ImportError:
        if device != "cpu":
            raise
        src, dst = _buffers(nbytes)
        return lambda: np.copyto(dst, src)
    if device == "cpu":
        ts, td = (torch.from_numpy(a) for a in _buffers(nbytes))
        return lambda: td.copy_(ts)
    ts = torch.ones(max(1, nbytes // 4), device=device)
    td = torch.empty_like(ts)

    def copy() -> None:
        td.copy_(ts)
        torch.cuda.synchronize()

    return copy


def copy_candidate(nbytes: int, device: str = "cpu") -> Candidate:
    """The copy of `nbytes` as a comparison's candidate; it reads and writes them."""
    return Candidate("copy", "copy", copy_fn(nbytes, device), nbytes=2 * nbytes)
