"""Which BLAS torch calls on this CPU, for the crossovers that depend on it."""

from __future__ import annotations

import functools

import torch


@functools.cache
def mkl_off_intel() -> bool:
    """Whether torch's BLAS is Intel's MKL on another vendor's CPU.

    MKL runs generic kernels there. Its GEMV is then slower than NumPy's fused
    per-vector loop on long rows (2-core AMD EPYC, float32: 256x1024 22-24 us
    against 28-31), and its batched GEMM reads a B operand whose batches interleave
    in memory no slower than a contiguous copy of it (``bind,jnd->bnij``, MXNet
    shapes: the copy costs 1.6-4% there, where on an Intel Xeon it saves 10%).
    """
    try:
        with open("/proc/cpuinfo") as f:
            intel = "GenuineIntel" in f.read(4096)
    except OSError:
        return False
    return bool(torch.backends.mkl.is_available()) and not intel  # type: ignore[no-untyped-call]
