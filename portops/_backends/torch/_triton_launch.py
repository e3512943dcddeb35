"""Launching the package's Triton kernels: accumulation types, and a launcher that fixes a
kernel's grid and arguments once and then calls its compiled form directly.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import triton.language as tl

__all__ = ["ACCUMULATOR", "Launcher"]

# Accumulation type per dtype (of the real parts for complex ones).
ACCUMULATOR = {
    torch.float16: tl.float32, torch.bfloat16: tl.float32, torch.float32: tl.float32,
    torch.float64: tl.float64, torch.complex64: tl.float32, torch.complex128: tl.float64,
    torch.int8: tl.int8, torch.int16: tl.int16, torch.int32: tl.int32, torch.int64: tl.int64,
    torch.uint8: tl.uint8,
}  # fmt: skip


def _hooks_idle() -> bool:
    """True when no Triton launch hook is installed (profilers install them)."""
    try:
        from triton import knobs

        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    except (ImportError, AttributeError):
        return False
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


def _misaligned(tensors: tuple[torch.Tensor, ...]) -> bool:
    """True when a tensor's data is not 16-byte aligned (Triton specialises on it)."""
    return any(t.data_ptr() & 15 for t in tensors)


# torch's private fast readers where present, the public ones elsewhere.
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream
)


class Launcher:
    """A kernel with grid, scalars and constexprs fixed; later calls skip Triton's JIT."""

    __slots__ = ("compiled", "constexprs", "device", "grid", "kernel", "n_scalars", "tail")

    def __init__(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        scalars: tuple[int, ...],
        constexprs: dict[str, Any],
        device: int | None,
    ) -> None:
        self.kernel = kernel
        self.grid = grid
        self.constexprs = constexprs
        # The compiled launcher takes every parameter in order, constexprs included.
        params = [constexprs[n] for n in kernel.arg_names if n in constexprs]
        self.tail = (*scalars, *params)
        self.n_scalars = len(scalars)
        self.compiled: Any = None
        self.device = -1 if device is None else device

    def __call__(self, *tensors: torch.Tensor) -> None:
        compiled = self.compiled
        if compiled is not None and not _misaligned(tensors) and _current_device() == self.device:
            g = self.grid
            compiled.run(
                g[0], g[1], g[2], _raw_stream(self.device), compiled.function,
                compiled.packed_metadata, None, None, None, *tensors, *self.tail,
            )  # fmt: skip
            return
        launch = self.kernel[self.grid]
        # CPU tensors (device -1) run under Triton's interpreter (tests).
        with contextlib.nullcontext() if self.device < 0 else torch.cuda.device(self.device):
            result = launch(*tensors, *self.tail[: self.n_scalars], **self.constexprs)
        ready = all(hasattr(result, a) for a in ("run", "function", "packed_metadata"))
        if compiled is None and ready and not _misaligned(tensors) and _hooks_idle():
            self.compiled = result
