"""PyTorch CUDA kernels of the shift_sum family (Triton), planned once per signature.

Eager calls run a plan (see :mod:`portops._plans`): the Triton kernel with its grid and
arguments fixed, launched directly — through an ``autograd.Function`` when a gradient is
needed, whose backward calls the public operations (planned as well). Under
``torch.compile`` the same kernels are registered on the ``portops::`` custom ops, whose
fake implementations and autograd formulas live in ``shift_sum.py``.

The pseudo-inverse is two launches with a mask (``1 / Phi`` over the mask's own extent,
then the adjoint scaled by it) and one without (``1 / Phi`` then depends on the
signature alone and is computed with the plan). It has its own op,
``portops::shift_sum_pinv``, for ``torch.compile``.

Triton is imported on the first CUDA call only. Without Triton (or for a layout the
kernels do not cover) the CPU path's ATen code runs, which works on CUDA too. The seed's
slice-add loop and ``scatter_add_`` stay registered as alternatives (``portops.prefer``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import cache
from typing import Any

import torch

from ... import extend
from ..._arrays import namespace_of
from ..._generic import shift_sum as generic
from ..._ops.shift_sum import ShiftSumArgs, result_shape
from ..._plans import PlanCache
from ...extend import Priority
from . import shift_sum as ops

Run = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


@cache
def _triton() -> Any:
    """The Triton kernels module, or None when Triton is not installed."""
    try:
        from . import _triton_shift_sum
    except ImportError:
        return None
    return _triton_shift_sum


def _composed_pinv(
    y: torch.Tensor, offsets: list[int], axis: int, cax: int, mask: torch.Tensor | None
) -> torch.Tensor:
    xp = namespace_of(y)
    return ops.pinv(ShiftSumArgs(y, tuple(offsets), axis, cax, mask, True, xp))


_ATEN = {"forward": ops._forward_kernel, "adjoint": ops._adjoint_kernel, "pinv": _composed_pinv}


def kernel_plan(name: str, a: ShiftSumArgs, raw: bool = True) -> Run:
    """The CUDA kernel of `name` as a function of the call's arrays (`raw`: as passed
    to the public function; else normalised), giving the call's result.

    The kernels read arrays through their data pointers and the strides fixed by the
    signature, so the raw arrays go straight in: the channel axis a ``y`` lacks and the
    dims a mask lacks are size-1 views of the same memory. A strided input whose dims do
    not merge into the kernels' six is planned for its contiguous copy; a layout the
    kernels do not cover falls back to ATen.
    """
    kernels = _triton()
    if kernels is not None:
        planner = getattr(kernels, f"plan_{name}")
        args = (tuple(a.offsets), a.axis, a.channel_axis, a.mask, result_shape(name, a))
        run: Run | None = None
        try:
            run = planner(a.array, *args)
        except NotImplementedError:
            try:
                contiguous = planner(a.array.contiguous(), *args)
            except NotImplementedError:
                pass
            else:
                run = lambda arr, mask: contiguous(arr.contiguous(), mask)  # noqa: E731
        if run is not None:
            return _cast_mask(run, a)
    return ops.kernel_run(a, _ATEN[name], adjoint=name != "forward", raw=raw)


def _cast_mask(run: Run, a: ShiftSumArgs) -> Run:
    """`run`, casting a mask of another dtype (bool) to the one validation chose."""
    if a.mask is None:
        return run
    dtype = a.mask.dtype

    def cast(arr: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None and mask.dtype != dtype:
            mask = mask.to(dtype)
        return run(arr, mask)

    return cast


# ----------------------------------------------------------------------------- eager plans


def plan_forward(a: ShiftSumArgs, raw: bool = True) -> Run:
    """Plan of a forward call on CUDA tensors."""
    return ops.plan_linear(a, kernel_plan("forward", a, raw), adjoint=False, raw=raw)


def plan_adjoint(a: ShiftSumArgs, raw: bool = True) -> Run:
    """Plan of an adjoint call on CUDA tensors."""
    return ops.plan_linear(a, kernel_plan("adjoint", a, raw), adjoint=True, raw=raw)


class _Pinv(torch.autograd.Function):
    """The fused pseudo-inverse, differentiable in ``y`` (it is linear in ``y``)."""

    @staticmethod
    def forward(
        ctx: Any, y: torch.Tensor, mask: torch.Tensor | None, run: Run, params: tuple[Any, ...]
    ) -> torch.Tensor:
        ctx.params, ctx.y_dtype = params, y.dtype
        ctx.save_for_backward(mask)
        return run(y, mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (mask,) = ctx.saved_tensors
        offsets, axis, cax, keepdims = ctx.params
        grad_y = _pinv_adjoint(grad, mask, offsets, axis, cax, keepdims)
        return grad_y.to(ctx.y_dtype), None, None, None


def _pinv_adjoint(
    grad: torch.Tensor,
    mask: torch.Tensor | None,
    offsets: list[int],
    axis: int,
    cax: int,
    keepdims: bool,
) -> torch.Tensor:
    """``D A_m(grad)`` with ``D = diag(1 / Phi)``: the adjoint of ``pinv = A_m^H D``.

    The result has ``y``'s shape: the channel axis kept with size 1 when `keepdims`.
    """
    from ..._ops.shift_sum import shift_sum

    u = shift_sum(grad, offsets, axis=axis, channel_axis=cax, mask=mask, keepdims=True)
    xp = namespace_of(u)
    if mask is not None and mask.ndim < u.ndim:
        mask = mask.reshape((1,) * (u.ndim - mask.ndim) + tuple(mask.shape))

    def forward_public(b: ShiftSumArgs) -> torch.Tensor:
        return shift_sum(b.array, list(b.offsets), axis=axis, channel_axis=cax, keepdims=True)

    a = ShiftSumArgs(u, tuple(offsets), axis, cax, mask, True, xp)
    grad_y = generic.divide_where_positive(xp, u, generic.overlap(a, forward_public))
    return grad_y if keepdims else grad_y.squeeze(cax)


def plan_pinv(a: ShiftSumArgs, raw: bool = True) -> Run:
    """Plan of a pseudo-inverse call on CUDA tensors.

    When the mask itself needs a gradient, the composition of the two differentiable
    operators runs instead of the fused kernels.
    """
    mask = a.mask
    if mask is not None and mask.requires_grad and torch.is_grad_enabled():
        normalize = ops._normalizer(a, expand=raw and not a.keepdims)
        template = a._replace(array=None, mask=None)  # the plan keeps no array alive

        def composed(y: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
            y, m = normalize(y, m)
            return ops.pinv(template._replace(array=y, mask=m))

        return composed
    run = kernel_plan("pinv", a, raw)
    if not ops.needs_grad(a):
        return run
    params = (list(a.offsets), a.axis, a.channel_axis, a.keepdims or not raw)

    def with_grad(y: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        return _Pinv.apply(y, m, run, params)

    return with_grad


def forward(a: ShiftSumArgs) -> torch.Tensor:
    """Triton row (or general) gather kernel, one launch, mask fused; autograd."""
    if ops._compiling():
        return ops.forward(a)
    return plan_forward(a, raw=False)(a.array, a.mask)


def adjoint(a: ShiftSumArgs) -> torch.Tensor:
    """Triton row (or general) kernel writing every channel's window, mask fused."""
    if ops._compiling():
        return ops.adjoint(a)
    return plan_adjoint(a, raw=False)(a.array, a.mask)


def pinv(a: ShiftSumArgs) -> torch.Tensor:
    """Fused ``A^H (y / Phi)``: one launch without a mask, two with one."""
    if ops._compiling():
        mask = a.mask
        if mask is not None and mask.requires_grad:
            return ops.pinv(a)
        return shift_sum_pinv_op(a.array, list(a.offsets), a.axis, a.channel_axis, mask)
    return plan_pinv(a, raw=False)(a.array, a.mask)


# ----------------------------------------------------------------------------- custom ops
# torch.compile calls the ops; their CUDA kernels keep one plan per tensor layout.

_op_plans = PlanCache(64)


def _op_key(name: str, a: torch.Tensor, m: torch.Tensor | None, args: tuple[Any, ...]) -> Hashable:
    def sig(t: torch.Tensor | None) -> Hashable:
        if t is None:
            return None
        return (t.dtype, t.shape, t.stride(), t.get_device(), t.is_conj())

    return (name, sig(a), sig(m), tuple(args[0]), args[1], args[2])


def _op_kernel(name: str) -> Callable[..., torch.Tensor]:
    def kernel(
        a: torch.Tensor, offsets: list[int], axis: int, cax: int, mask: torch.Tensor | None
    ) -> torch.Tensor:
        key = _op_key(name, a, mask, (offsets, axis, cax))
        run = _op_plans.get(key)
        if run is None:
            args = ShiftSumArgs(a, tuple(offsets), axis, cax, mask, True, namespace_of(a))
            run = kernel_plan(name, args, raw=False)
            _op_plans.put(key, run)
        return run(a, mask)

    return kernel


ops.shift_sum_op.register_kernel("cuda")(_op_kernel("forward"))
ops.shift_sum_adjoint_op.register_kernel("cuda")(_op_kernel("adjoint"))


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


shift_sum_pinv_op.register_kernel("cuda")(_op_kernel("pinv"))


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


def slice_add_loop(a: ShiftSumArgs) -> torch.Tensor:
    """One slice-add per channel (the seed's method), differentiable by autograd."""
    y = ops._forward_kernel(a.array, list(a.offsets), a.axis, a.channel_axis, a.mask)
    return y if a.keepdims else y.squeeze(a.channel_axis)


extend.register(
    "shift_sum",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=Priority.OVERRIDE,
    summary="Triton row gather kernel: one launch, no atomics, mask fused; planned",
    planner=ops._planned(plan_forward),
)(forward)
extend.register(
    "shift_sum",
    "torch_slice_add_loop",
    libraries=["torch"],
    devices=["cuda"],
    priority=Priority.BASELINE + 5,
    summary="one slice-add per channel, autograd through ATen (alternative)",
)(slice_add_loop)
extend.register(
    "shift_sum_adjoint",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=Priority.OVERRIDE,
    summary="Triton row kernel: each program writes a block of every channel; planned",
    planner=ops._planned(plan_adjoint),
)(adjoint)
extend.register(
    "shift_sum_pinv",
    "torch_cuda_gather",
    libraries=["torch"],
    devices=["cuda"],
    priority=Priority.OVERRIDE,
    summary="Triton: 1 / Phi over the mask's extent, then the adjoint scaled by it",
    planner=ops._planned(plan_pinv),
)(pinv)
