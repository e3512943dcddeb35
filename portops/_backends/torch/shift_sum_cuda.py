"""PyTorch CUDA kernels of the shift_sum family, registered on the same custom ops.

``portops::shift_sum`` and ``portops::shift_sum_adjoint`` get a CUDA kernel (Triton,
see :mod:`portops._triton_shift_sum`): one launch each, a gather with the mask fused.
Their fake implementations and autograd formulas are those of ``shift_sum.py``, so
gradients (x and mask) and ``torch.compile(fullgraph=True)`` work unchanged.

The pseudo-inverse gets its own op, ``portops::shift_sum_pinv``, so that CUDA runs it
in two launches (one without a mask) instead of five; its autograd formula covers ``y``
(the op is linear in ``y``). When the mask itself needs a gradient the dispatcher uses
the composition of the two differentiable ops instead.

Triton is imported on the first CUDA call only. Without Triton (or for a layout the
kernels do not cover) the CUDA kernels fall back to the CPU path's ATen code, which
runs on CUDA too. The seed's slice-add loop and ``scatter_add_`` stay registered as
alternatives (``portops.prefer``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from ... import _dispatch
from ..._arrays import namespace_of
from ..._generic import shift_sum as generic
from ...shift_sum import ShiftSumArgs
from . import shift_sum as ops

Kernel = Callable[[torch.Tensor, list[int], int, int, torch.Tensor | None], torch.Tensor]


@cache
def _triton() -> Any:
    """The Triton kernels module, or None when Triton is not installed."""
    try:
        from ... import _triton_shift_sum
    except ImportError:
        return None
    return _triton_shift_sum


def _run(
    name: str,
    fallback: Kernel,
    a: torch.Tensor,
    offsets: list[int],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    kernels = _triton()
    if kernels is not None:
        # A strided input whose dims do not merge into the kernels' six is retried
        # contiguous; a mask broadcast in more ways than they cover falls back.
        for arr in (a, a.contiguous()):
            try:
                result: torch.Tensor = getattr(kernels, name)(
                    arr, offsets, axis, channel_axis, mask
                )
                return result
            except NotImplementedError:
                continue
    return fallback(a, offsets, axis, channel_axis, mask)


@ops.shift_sum_op.register_kernel("cuda")
def _forward_cuda(
    x: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    return _run("forward", ops._forward_kernel, x, offsets, axis, channel_axis, mask)


@ops.shift_sum_adjoint_op.register_kernel("cuda")
def _adjoint_cuda(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    return _run("adjoint", ops._adjoint_kernel, y, offsets, axis, channel_axis, mask)


def _pinv_composed(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    a = ShiftSumArgs(y, tuple(offsets), axis, channel_axis, mask, True, namespace_of(y))
    return ops.pinv(a)


@torch.library.custom_op("portops::shift_sum_pinv", mutates_args=())
def shift_sum_pinv_op(
    y: torch.Tensor,
    offsets: list[int],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Pseudo-inverse; `y` has the channel axis with size 1 (composed on other devices)."""
    return _pinv_composed(y, offsets, axis, channel_axis, mask)


@shift_sum_pinv_op.register_kernel("cuda")
def _pinv_cuda(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    return _run("pinv", _pinv_composed, y, offsets, axis, channel_axis, mask)


@shift_sum_pinv_op.register_fake
def _(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    shape = ops.x_shape(list(y.shape), offsets, axis, channel_axis)
    return y.new_empty(shape, dtype=ops.result_dtype(y, mask))


def _pinv_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    y, offsets, axis, channel_axis, mask = inputs
    ctx.offsets, ctx.axis, ctx.channel_axis = offsets, axis, channel_axis
    ctx.y_dtype = y.dtype
    ctx.save_for_backward(mask)


def _pinv_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # pinv = A_m^H D with D = diag(1 / Phi) real, so grad_y = D A_m(grad).
    (mask,) = ctx.saved_tensors
    if ctx.needs_input_grad[4]:
        raise RuntimeError(
            "portops::shift_sum_pinv has no gradient for the mask; "
            "portops.shift_sum_pinv uses the composed ops when the mask needs one"
        )
    args = (ctx.offsets, ctx.axis, ctx.channel_axis)
    u = ops.shift_sum_op(grad, *args, mask)
    xp = namespace_of(u)
    a = ShiftSumArgs(u, tuple(ctx.offsets), ctx.axis, ctx.channel_axis, mask, True, xp)
    grad_y = generic.divide_where_positive(xp, u, generic.overlap(a, ops.forward))
    return grad_y.to(ctx.y_dtype), None, None, None, None


shift_sum_pinv_op.register_autograd(_pinv_backward, setup_context=_pinv_setup)


def pinv(a: ShiftSumArgs) -> torch.Tensor:
    """The fused pinv op (two launches), or the composed ops when the mask needs a gradient."""
    mask = a.mask
    if mask is not None and mask.requires_grad and torch.is_grad_enabled():
        return ops.pinv(a)
    return shift_sum_pinv_op(a.array, list(a.offsets), a.axis, a.channel_axis, mask)


def slice_add_loop(a: ShiftSumArgs) -> torch.Tensor:
    """One slice-add per channel (the seed's method), differentiable by autograd."""
    y = ops._forward_kernel(a.array, list(a.offsets), a.axis, a.channel_axis, a.mask)
    return y if a.keepdims else y.squeeze(a.channel_axis)


_dispatch.register(
    "shift_sum",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=20,
    summary="custom op, Triton gather kernel: one launch, no atomics, mask fused",
)(ops.forward)
_dispatch.register(
    "shift_sum",
    "torch_slice_add_loop",
    libraries=["torch"],
    devices=["cuda"],
    priority=5,
    summary="one slice-add per channel, autograd through ATen (alternative)",
)(slice_add_loop)
_dispatch.register(
    "shift_sum_adjoint",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=20,
    summary="custom op, Triton gather kernel: one launch, mask fused",
)(ops.adjoint)
_dispatch.register(
    "shift_sum_pinv",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=20,
    summary="custom op, Triton: y / Phi gathered from |mask|^2, then the adjoint",
)(pinv)
