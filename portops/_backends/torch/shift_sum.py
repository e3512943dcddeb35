"""PyTorch shift_sum family as ``torch.library`` custom operators.

``portops::shift_sum`` and ``portops::shift_sum_adjoint`` are opaque to autograd and
``torch.compile``: each has a fake (meta) implementation for tracing and an autograd
formula that calls the other operator (the backward of ``A`` is ``A^H`` and vice
versa), so gradients flow to ``x``/``y`` and ``mask``, to any order. The
pseudo-inverse is composed from them and is differentiable as a result.

Kernels: the forward is a loop of in-place slice-adds into a small, cache-resident
``y`` (``addcmul_`` fuses the mask, no full-size temporary); ATen parallelises each
add over the cores. The adjoint writes each window of ``y`` straight into the result
with a single strided copy (or multiply) when the offsets are evenly spaced, using
``unfold``'s zero-copy view of all windows. Large CPU results come from
:mod:`portops._buffers` (reused, huge-page backed): the first touch of a fresh 117 MB
tensor otherwise costs the kernel's page zeroing on top of the copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ... import _buffers as buffers
from ... import extend
from ..._caches import l2_bytes, llc_bytes
from ..._generic import shift_sum as generic
from ..._ops.shift_sum import ShiftSumArgs
from ...extend import Priority
from ..numpy import shift_sum as numpy_shift_sum
from .views import numpy_view

_HALF = (torch.float16, torch.bfloat16)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


def result_dtype(a: torch.Tensor, mask: torch.Tensor | None) -> torch.dtype:
    """``result_type(a, mask)``."""
    return a.dtype if mask is None else torch.result_type(a, mask)


def empty(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``; large CPU results come from portops' reused buffers."""
    if device.type == "cpu" and dtype not in _HALF and dtype != torch.bool:
        if math.prod(shape) * dtype.itemsize >= buffers.MIN_BYTES:
            np_dtype = torch.empty((), dtype=dtype).numpy().dtype
            return torch.from_numpy(buffers.empty(shape, np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def y_shape(x_shape: list[int], offsets: list[int], axis: int, channel_axis: int) -> list[int]:
    """Shape of the forward's result, channel axis kept with size 1."""
    shape = list(x_shape)
    shape[axis] += max(offsets)
    shape[channel_axis] = 1
    return shape


def x_shape(y_shape: list[int], offsets: list[int], axis: int, channel_axis: int) -> list[int]:
    """Shape of the adjoint's result from ``y``'s (channel axis of size 1)."""
    shape = list(y_shape)
    shape[axis] -= max(offsets)
    shape[channel_axis] = len(offsets)
    return shape


def _forward_kernel(
    x: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    out_dtype = result_dtype(x, mask)
    acc = _acc_dtype(out_dtype)
    width = x.shape[axis]
    y = torch.zeros(y_shape(list(x.shape), offsets, axis, channel_axis), dtype=acc, device=x.device)
    if mask is not None and mask.dtype != acc:
        mask = mask.to(acc)
    one_mask = mask is None or mask.shape[channel_axis] == 1
    for c, o in enumerate(offsets):
        xc = x.narrow(channel_axis, c, 1)
        if xc.dtype != acc:
            xc = xc.to(acc)
        window = y.narrow(axis, o, width)
        if mask is None:
            window.add_(xc)
        else:
            window.addcmul_(xc, mask if one_mask else mask.narrow(channel_axis, c, 1))
    return y if acc == out_dtype else y.to(out_dtype)


def _even_step(offsets: list[int]) -> int | None:
    """The constant spacing of `offsets` (which start at 0 for channel 0), if any."""
    if len(offsets) == 1:
        return 1
    step = offsets[1] - offsets[0]
    if offsets[0] != 0 or step <= 0:
        return None
    return step if all(o == c * step for c, o in enumerate(offsets)) else None


def _adjoint_kernel(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    out_dtype = result_dtype(y, mask)
    shape = x_shape(list(y.shape), offsets, axis, channel_axis)
    out = empty(shape, out_dtype, y.device)
    if out.numel() == 0:
        return out
    if mask is not None and mask.is_complex():
        mask = mask.conj()
    width = shape[axis]
    step = _even_step(offsets)
    if step is not None:
        # unfold turns the shifted axis into the window index and appends the window
        # contents; they become the channel axis and the shifted axis of x.
        k = axis - (axis > channel_axis)
        windows = y.squeeze(channel_axis).unfold(k, width, step)
        windows = windows.movedim((k, -1), (channel_axis, axis))
        # Windows past the last channel appear when y is wider than needed.
        windows = windows.narrow(channel_axis, 0, len(offsets))
        if mask is None:
            out.copy_(windows)
        else:
            torch.mul(windows, mask, out=out)
        return out
    for c, o in enumerate(offsets):
        window = y.narrow(axis, o, width)
        dst = out.narrow(channel_axis, c, 1)
        if mask is None:
            dst.copy_(window)
        else:
            m = mask if mask.shape[channel_axis] == 1 else mask.narrow(channel_axis, c, 1)
            torch.mul(window, m, out=dst)
    return out


@torch.library.custom_op("portops::shift_sum", mutates_args=())
def shift_sum_op(
    x: torch.Tensor,
    offsets: list[int],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Forward operator; the result keeps the channel axis with size 1."""
    return _forward_kernel(x, offsets, axis, channel_axis, mask)


@shift_sum_op.register_fake
def _(
    x: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    shape = y_shape(list(x.shape), offsets, axis, channel_axis)
    return x.new_empty(shape, dtype=result_dtype(x, mask))


@torch.library.custom_op("portops::shift_sum_adjoint", mutates_args=())
def shift_sum_adjoint_op(
    y: torch.Tensor,
    offsets: list[int],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Adjoint operator; `y` has the channel axis with size 1."""
    return _adjoint_kernel(y, offsets, axis, channel_axis, mask)


@shift_sum_adjoint_op.register_fake
def _(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    shape = x_shape(list(y.shape), offsets, axis, channel_axis)
    return y.new_empty(shape, dtype=result_dtype(y, mask))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    arr, offsets, axis, channel_axis, mask = inputs
    ctx.offsets, ctx.axis, ctx.channel_axis = offsets, axis, channel_axis
    ctx.arr_dtype = arr.dtype
    ctx.mask_dtype = None if mask is None else mask.dtype
    ctx.save_for_backward(arr if mask is not None else None, mask)


def _reduce_to(grad: torch.Tensor, like_shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    grad = grad.sum_to_size(like_shape)
    if not dtype.is_complex and grad.is_complex():
        grad = grad.real
    return grad.to(dtype)


def _forward_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # y = A(m * x): grad_x = conj(m) * A^H g, grad_m = conj(x) * A^H g.
    x, mask = ctx.saved_tensors
    args = (ctx.offsets, ctx.axis, ctx.channel_axis)
    grad_x = grad_mask = None
    if ctx.needs_input_grad[0]:
        grad_x = shift_sum_adjoint_op(grad, *args, mask).to(ctx.arr_dtype)
    if mask is not None and ctx.needs_input_grad[4]:
        u = shift_sum_adjoint_op(grad, *args, None)
        grad_mask = _reduce_to(u * x.conj(), mask.shape, ctx.mask_dtype)
    return grad_x, None, None, None, grad_mask


def _adjoint_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    # x = conj(m) * A^H y: grad_y = A(m * g), grad_m = conj(g) * A^H y.
    y, mask = ctx.saved_tensors
    args = (ctx.offsets, ctx.axis, ctx.channel_axis)
    grad_y = grad_mask = None
    if ctx.needs_input_grad[0]:
        grad_y = shift_sum_op(grad, *args, mask).to(ctx.arr_dtype)
    if mask is not None and ctx.needs_input_grad[4]:
        u = shift_sum_adjoint_op(y, *args, None)
        grad_mask = _reduce_to(grad.conj() * u, mask.shape, ctx.mask_dtype)
    return grad_y, None, None, None, grad_mask


shift_sum_op.register_autograd(_forward_backward, setup_context=_setup)
shift_sum_adjoint_op.register_autograd(_adjoint_backward, setup_context=_setup)


# ----------------------------------------------------------------------------- eager calls
# Outside torch.compile the custom ops' Python dispatch (tens of microseconds) buys
# nothing: calls run the kernels directly, through an autograd.Function when a gradient
# is needed. Its backward calls the public operations, which plan their own calls, so
# gradients of any order flow and a training loop's backward pays one lookup.

Run = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


class _Linear(torch.autograd.Function):
    """``A(m * x)`` (forward) or ``conj(m) * A^H y`` (adjoint) by a planned kernel.

    Takes and returns the arrays as the public call does (``keepdims`` in `params`).
    """

    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        mask: torch.Tensor | None,
        run: Run,
        adjoint: bool,
        params: tuple[list[int], int, int, bool],
    ) -> torch.Tensor:
        ctx.adjoint, ctx.params = adjoint, params
        ctx.dtypes = (a.dtype, None if mask is None else mask.dtype)
        ctx.save_for_backward(a if mask is not None else None, mask)
        return run(a, mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        from ..._ops.shift_sum import shift_sum, shift_sum_adjoint

        a, mask = ctx.saved_tensors
        offsets, axis, cax, keepdims = ctx.params
        a_dtype, mask_dtype = ctx.dtypes
        kw = dict(axis=axis, channel_axis=cax, keepdims=keepdims)
        grad_a = grad_mask = None
        if ctx.needs_input_grad[0]:
            if ctx.adjoint:  # grad_y = A(m * g)
                grad_a = shift_sum(grad, offsets, mask=mask, **kw)
            else:  # grad_x = conj(m) * A^H g
                grad_a = shift_sum_adjoint(grad, offsets, mask=mask, **kw)
            if grad_a.dtype != a_dtype:
                grad_a = grad_a.to(a_dtype)
        if mask is not None and ctx.needs_input_grad[1]:
            if ctx.adjoint:  # grad_m = conj(g) * A^H y
                u = shift_sum_adjoint(a, offsets, **kw)
                grad_mask = _reduce_to(grad.conj() * u, mask.shape, mask_dtype)
            else:  # grad_m = conj(x) * A^H g
                u = shift_sum_adjoint(grad, offsets, **kw)
                grad_mask = _reduce_to(u * a.conj(), mask.shape, mask_dtype)
        return grad_a, grad_mask, None, None, None


def needs_grad(a: ShiftSumArgs) -> bool:
    """Whether autograd must record this call."""
    if not torch.is_grad_enabled():
        return False
    return a.array.requires_grad or (a.mask is not None and a.mask.requires_grad)


def _normalizer(a: ShiftSumArgs, expand: bool) -> Callable[..., tuple[Any, Any]]:
    """Turn a call's raw (array, mask) into the normalised pair `a` was made from.

    `expand`: the array is a ``y`` whose channel axis must be inserted. The mask is
    reshaped to the array's number of dimensions and cast from bool, as validation did.
    """
    cax = a.channel_axis
    mask = a.mask
    shape = None if mask is None else tuple(mask.shape)
    dtype = None if mask is None else mask.dtype

    def normalize(arr: torch.Tensor, m: torch.Tensor | None) -> tuple[Any, Any]:
        if expand:
            arr = arr.unsqueeze(cax)
        if m is not None:
            if m.dtype != dtype:
                m = m.to(dtype)
            if m.shape != shape and shape is not None:
                m = m.reshape(shape)
        return arr, m

    return normalize


def kernel_run(
    a: ShiftSumArgs, kernel: Callable[..., torch.Tensor], *, adjoint: bool, raw: bool
) -> Run:
    """`kernel` (normalised arrays in, channel axis kept) as a function of the call's
    arrays (`raw`) or of normalised ones, giving the call's result."""
    normalize = _normalizer(a, expand=raw and adjoint and not a.keepdims)
    offsets, axis, cax = list(a.offsets), a.axis, a.channel_axis
    squeeze = not adjoint and not a.keepdims

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        arr, m = normalize(arr, m)
        out = kernel(arr, offsets, axis, cax, m)
        return out.squeeze(cax) if squeeze else out

    return run


def plan_linear(a: ShiftSumArgs, run: Run, *, adjoint: bool, raw: bool = True) -> Run:
    """The plan of a forward or adjoint call: `run` itself, or through autograd.

    `run` maps the call's arrays (raw ones when `raw`) to its result.
    """
    if not needs_grad(a):
        return run
    keepdims = a.keepdims or (adjoint and not raw)
    params = (list(a.offsets), a.axis, a.channel_axis, keepdims)

    def with_grad(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = _Linear.apply(arr, m, run, adjoint, params)  # type: ignore[no-untyped-call]
        return out

    return with_grad


def _compiling() -> bool:
    return bool(torch.compiler.is_compiling())


def forward(a: ShiftSumArgs) -> torch.Tensor:
    """Slice-add loop (mask fused with ``addcmul_``), differentiable; a custom op when
    compiled."""
    if _compiling():
        y: torch.Tensor = shift_sum_op(a.array, list(a.offsets), a.axis, a.channel_axis, a.mask)
        return y if a.keepdims else y.squeeze(a.channel_axis)
    return plan_forward(a, raw=False)(a.array, a.mask)


def adjoint(a: ShiftSumArgs) -> torch.Tensor:
    """One strided copy (or multiply) of all windows into the result, differentiable."""
    if _compiling():
        x: torch.Tensor = shift_sum_adjoint_op(
            a.array, list(a.offsets), a.axis, a.channel_axis, a.mask
        )
        return x
    return plan_adjoint(a, raw=False)(a.array, a.mask)


def plan_forward(a: ShiftSumArgs, raw: bool = True) -> Run:
    """Plan of a forward call on CPU tensors."""
    if not needs_grad(a):
        via_numpy = _numpy_forward(a)
        if via_numpy is not None:
            return via_numpy
    run = kernel_run(a, _forward_kernel, adjoint=False, raw=raw)
    return plan_linear(a, run, adjoint=False, raw=raw)


# Dtypes whose CPU tensors have zero-copy NumPy views (half precision stays in torch).
_NUMPY_ARRAYS = frozenset({torch.float32, torch.float64, torch.complex64, torch.complex128})
_NUMPY_MASKS = _NUMPY_ARRAYS | {torch.bool, torch.uint8, torch.int8, torch.int16}
_NUMPY_MASKS |= {torch.int32, torch.int64}
# Up to this many bytes of x, NumPy's kernels on views beat torch's slice-adds: each of
# torch's adds pays its dispatch (B=1, C=28, 64x64 float32: 56-200 µs against 245-394
# µs for the loop); past it torch's adds run on every core and win (B=1, C=8, 256x256:
# 1.7x the other way, on 2 cores). Half a core's L2. An x with strided rows (channels
# last) goes to NumPy's strided kernel, blocked in the cache, once it outgrows the L3:
# then each of torch's adds gathers its channel through all of x from memory (2-core
# AMD EPYC, 32 MiB L3, B=1, C=28, 660x660 (48 MB): 13 ms against 32 ms); below that
# torch's gathers are about twice as fast as NumPy's (B=16, C=8, 256x256 (32 MiB):
# 6.5 ms against 7.6 ms; B=1, C=8, 660x660: 1.2 ms against 2.5 ms).
NUMPY_FORWARD_BYTES = l2_bytes() // 2
STRIDED_NUMPY_BYTES = llc_bytes()


def _numpy_forward(a: ShiftSumArgs) -> Run | None:
    """A small forward without gradients: NumPy's kernels on zero-copy views (the same
    arguments, raw or normalised: the forward's x is never reshaped), which pick the
    sheared sum or the slice-add loop by the shape of x (see
    :mod:`portops._backends.numpy.shift_sum`). None past NUMPY_FORWARD_BYTES (unless
    x's rows are strided and it is past STRIDED_NUMPY_BYTES), for dtypes NumPy does
    not share, conjugate views and subclasses."""
    x, mask = a.array, a.mask
    if type(x) is not torch.Tensor or x.dtype not in _NUMPY_ARRAYS or x.is_conj():
        return None
    if mask is not None and (
        type(mask) is not torch.Tensor or mask.dtype not in _NUMPY_MASKS or mask.is_conj()
    ):
        return None
    m = None if mask is None else numpy_view(mask)
    record = ShiftSumArgs.make(
        "forward", numpy_view(x), a.offsets, a.axis, a.channel_axis, m, a.keepdims, np
    )
    nbytes = x.numel() * x.element_size()
    if nbytes > NUMPY_FORWARD_BYTES and not (
        nbytes > STRIDED_NUMPY_BYTES and numpy_shift_sum.strided_rows(record)
    ):
        return None
    kernel = numpy_shift_sum.plan_forward(record)
    if kernel is None:
        return None

    def via_numpy(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        return torch.from_numpy(kernel(numpy_view(arr), None if m is None else numpy_view(m)))

    return via_numpy


def _small_windows(a: ShiftSumArgs, raw: bool) -> Run | None:
    """The adjoint of a small call with evenly spaced offsets, everything precomputed:
    one view of all windows (``unfold``) and one copy (or multiply) into a new tensor.

    None where the general kernel is needed: uneven offsets, a result large enough for
    the reused buffers, complex masks (conjugated there).
    """
    y, mask, cax, axis = a.array, a.mask, a.channel_axis, a.axis
    step = _even_step(list(a.offsets))
    shape, dtype = list(a.shape), a.dtype
    if step is None or math.prod(shape) * dtype.itemsize >= buffers.MIN_BYTES:
        return None
    if (mask is not None and mask.is_complex()) or 0 in shape:
        return None
    width, channels = shape[axis], len(a.offsets)
    k = axis - (axis > cax)
    squeeze = not raw or a.keepdims  # the array has the channel axis, of size 1
    normalize_mask = _normalizer(a, expand=False)
    narrow = y.shape[axis] - width >= channels * step  # windows past the last channel

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        if squeeze:
            arr = arr.squeeze(cax)
        windows = arr.unfold(k, width, step).movedim((k, -1), (cax, axis))
        if narrow:
            windows = windows.narrow(cax, 0, channels)
        if m is None:
            return windows.contiguous()
        return torch.mul(windows, normalize_mask(arr, m)[1])

    return run


def plan_adjoint(a: ShiftSumArgs, raw: bool = True) -> Run:
    """Plan of an adjoint call on CPU tensors."""
    run = _small_windows(a, raw) or kernel_run(a, _adjoint_kernel, adjoint=True, raw=raw)
    return plan_linear(a, run, adjoint=True, raw=raw)


def plan_pinv(a: ShiftSumArgs) -> Run:
    """Plan of a pseudo-inverse call on CPU tensors: the composition, normalised once."""
    normalize = _normalizer(a, expand=not a.keepdims)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def run(y: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        y, m = normalize(y, m)
        return pinv(template._replace(array=y, mask=m))

    return run


def _planned(plan: Callable[[ShiftSumArgs], Run]) -> Callable[[ShiftSumArgs], Run | None]:
    """A planner for raw calls: `plan` built from normalised args, raw inputs later."""

    def planner(a: ShiftSumArgs) -> Run | None:
        return None if _compiling() else plan(a)

    return planner


def pinv(a: ShiftSumArgs) -> torch.Tensor:
    """``A^H (y / Phi)`` from the two differentiable operators."""
    x: torch.Tensor = generic.pinv(a, forward, adjoint)
    return x


def scatter_add(a: ShiftSumArgs) -> torch.Tensor:
    """``scatter_add_`` of every element to its shifted index (alternative).

    Channels are merged with the shifted axis so one ``scatter_add_`` handles them all.
    """
    x, offsets, ax, cax, mask = a.array, a.offsets, a.axis, a.channel_axis, a.mask
    z = x if mask is None else x * mask
    out_dtype = z.dtype
    k = ax - (ax > cax)  # the shifted axis once channels are removed
    z = z.to(_acc_dtype(out_dtype)).movedim(cax, k)  # (..., C, W, ...)
    width = z.shape[k + 1]
    merged = z.reshape(*z.shape[:k], len(offsets) * width, *z.shape[k + 2 :])
    cols = torch.arange(width, device=x.device)
    shift = torch.tensor(offsets, device=x.device)
    index = (shift[:, None] + cols[None, :]).reshape(-1)
    index = index.view([-1] + [1] * (merged.ndim - k - 1)).expand(merged.shape)
    y_shape = list(merged.shape)
    y_shape[k] = width + max(offsets)
    y = torch.zeros(y_shape, dtype=merged.dtype, device=x.device)
    y.scatter_add_(k, index, merged)
    y = y.unsqueeze(cax) if a.keepdims else y
    return y.to(out_dtype)


extend.register(
    "shift_sum",
    "torch_slice_add",
    libraries=["torch"],
    devices=["cpu"],  # CUDA tensors: shift_sum_cuda.py
    priority=Priority.SPECIALIZED,
    summary="slice-adds into a cache-resident y, mask fused (addcmul_); autograd; custom op",
    planner=_planned(plan_forward),
)(forward)
extend.register(
    "shift_sum",
    "torch_scatter_add",
    libraries=["torch"],
    priority=Priority.BASELINE,
    summary="scatter_add_ with precomputed indices (alternative, for comparison)",
)(scatter_add)
extend.register(
    "shift_sum_adjoint",
    "torch_window_copy",
    libraries=["torch"],
    devices=["cpu"],
    priority=Priority.SPECIALIZED,
    summary="one strided copy of all windows (unfold), mask fused; autograd; custom op",
    planner=_planned(plan_adjoint),
)(adjoint)
extend.register(
    "shift_sum_pinv",
    "torch_window_copy",
    libraries=["torch"],
    devices=["cpu"],
    priority=Priority.SPECIALIZED,
    summary="Phi by the forward, then the adjoint of y / Phi; autograd",
    planner=_planned(plan_pinv),
)(pinv)
