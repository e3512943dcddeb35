"""PyTorch shear / unshear: strided views and ``copy_``, the same ops on CPU and CUDA.

Kernels: on the CPU, shear of tensors of NumPy's dtypes without a mask or fractional
offsets goes through zero-copy NumPy views to the NumPy kernels
(:mod:`portops._shear.blocked`: cache-sized blocks over portops' threads), which write
the result tensor in place. Otherwise, shear zeroes the gaps around the
windows through a few ``as_strided`` views, then writes ``x`` (times the mask) into
the strided view of every window with one ``copy_`` (or ``mul``); unshear reads that
view of ``y`` with one copy. Fractional offsets take one ``lerp`` per group of
channels (sub-pixel dispersion by linear interpolation).

Gradients: shear's backward is unshear and vice versa. Eager calls that need
gradients go through an ``autograd.Function`` that runs the kernels directly (no
custom-op dispatch cost); under ``torch.compile`` the same kernels run inside the
``portops::shear`` / ``portops::unshear`` custom ops, which have fake implementations
and the same autograd formulas.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ... import _buffers as buffers
from ... import extend
from ..._kernels.geometry import linear_step
from ..._ops.shear import ShearArgs
from ..._shear import blocked
from ..._shear.layout import (
    ChannelGroup,
    channel_groups,
    gap_views,
    group_view,
    window_strides,
    windows_view,
)
from ...extend import Priority
from ..numpy import shear as numpy_kernels
from .views import numpy_view

_NO_BUFFER = (torch.float16, torch.bfloat16, torch.bool)
# CPU dtypes whose shear the NumPy kernels write through zero-copy views (see
# _via_numpy); half precision and bool stay in torch.
_VIA_NUMPY = (
    torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
)  # fmt: skip


def _result_dtype(a: torch.Tensor, mask: torch.Tensor | None) -> torch.dtype:
    return a.dtype if mask is None else torch.result_type(a, mask)


def _empty(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``; large CPU results come from portops' reused buffers."""
    if device.type == "cpu" and dtype not in _NO_BUFFER and not dtype.is_complex:
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        if math.prod(shape) * np_dtype.itemsize >= buffers.MIN_BYTES:
            return torch.from_numpy(buffers.empty(shape, np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def _via_numpy(x: torch.Tensor, fractions: list[float], mask: torch.Tensor | None) -> bool:
    """Whether shear goes to the NumPy kernels: CPU, a dtype NumPy has, integer offsets
    and no mask. There its staged block copies beat torch's zero-fill and strided
    ``copy_``; with a mask or fractions (one ``mul`` / ``lerp`` pass) and for unshear
    (one strided read) torch's own vectorised loops are as fast or faster."""
    return x.device.type == "cpu" and x.dtype in _VIA_NUMPY and not fractions and mask is None


def _numpy_kernel(
    x: torch.Tensor, shape: list[int], offsets: list[int], axis: int, channel_axis: int
) -> torch.Tensor:
    """:func:`blocked.shear_into` on NumPy views, writing a new tensor of `shape`."""
    out = _empty(shape, x.dtype, x.device)
    a = ShearArgs.make("shear", numpy_view(x), tuple(offsets), None, axis, channel_axis, None, np)
    blocked.shear_into(np, out.numpy(), a, numpy_kernels.runner(x.numel()))
    return out


def _growth(offsets: list[int], fractions: list[float]) -> int:
    if not fractions:
        return max(offsets)
    return max(n + (f > 0) for n, f in zip(offsets, fractions, strict=True))


def _channel(a: torch.Tensor, axis: int, c: int) -> torch.Tensor:
    return a if a.shape[axis] == 1 else a.narrow(axis, c, 1)


def _write(dst: torch.Tensor, src: torch.Tensor, mask: torch.Tensor | None) -> None:
    if mask is None:
        dst.copy_(src)
    else:
        torch.mul(src, mask, out=dst)


def _shear_kernel(
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    width = x.shape[axis]
    wide = list(x.shape)
    wide[axis] += _growth(offsets, fractions)
    dtype = _result_dtype(x, mask)
    if _via_numpy(x, fractions, mask):
        return _numpy_kernel(x, wide, offsets, axis, channel_axis)
    out = _empty(wide, dtype, x.device)
    if out.numel() == 0:
        return out
    if mask is not None and mask.dtype != dtype:
        mask = mask.to(dtype)
    if fractions:
        out.zero_()
        if width > 0:
            _fractional_shear(out, x, offsets, fractions, axis, channel_axis, mask)
        return out
    key = (tuple(wide), axis, channel_axis, tuple(offsets), width)
    gaps = gap_views(*key) if out.is_contiguous() else None
    if gaps is None:
        out.zero_()
    else:
        for v in gaps:
            out.as_strided(v.shape, v.strides, v.offset).zero_()
    view = windows_view(tuple(wide), tuple(x.shape), axis, channel_axis, tuple(offsets))
    if view is not None:
        _write(out.as_strided(view.shape, view.strides, view.offset), x, mask)
        return out
    for c, n in enumerate(offsets):
        dst = out.narrow(channel_axis, c, 1).narrow(axis, n, width)
        m = None if mask is None else _channel(mask, channel_axis, c)
        _write(dst, x.narrow(channel_axis, c, 1), m)
    return out


def _unshear_kernel(
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    width = y.shape[axis] - _growth(offsets, fractions)
    shape = list(y.shape)
    shape[axis] = width
    dtype = _result_dtype(y, mask)
    out = _empty(shape, dtype, y.device)
    if out.numel() == 0:
        return out
    if mask is not None:
        mask = mask.conj() if mask.is_complex() else mask
        if mask.dtype != dtype:
            mask = mask.to(dtype)
    lin = None if fractions else linear_step(tuple(offsets))
    if lin is not None:
        step, base = lin
        strides = window_strides(tuple(y.stride()), axis, channel_axis, step)
        if min(strides) >= 0:
            start = y.storage_offset() + base * y.stride(axis)
            _write(out, y.as_strided(shape, strides, start), mask)
            return out
    if fractions:
        _fractional_unshear(out, y, offsets, fractions, axis, channel_axis, mask)
        return out
    for c, n in enumerate(offsets):
        m = None if mask is None else _channel(mask, channel_axis, c)
        window = y.narrow(channel_axis, c, 1).narrow(axis, n, width)
        _write(out.narrow(channel_axis, c, 1), window, m)
    return out


def _groups(
    a: torch.Tensor, offsets: list[int], fractions: list[float], axis: int, channel_axis: int
) -> list[ChannelGroup]:
    """Channel groups whose strided views `a` can take (no negative strides)."""
    groups = []
    for g in channel_groups(tuple(offsets), tuple(fractions)):
        stride = g.every * a.stride(channel_axis) + g.step * a.stride(axis)
        if stride >= 0:
            groups.append(g)
        else:
            groups += [
                g._replace(start=c, every=1, size=1, first=offsets[c], step=0)
                for c in range(g.start, g.start + g.every * g.size, g.every)
            ]
    return groups


def _select(a: torch.Tensor | None, channel_axis: int, g: ChannelGroup) -> torch.Tensor | None:
    """The group's channels of `a` (all of a broadcast channel axis)."""
    if a is None or a.shape[channel_axis] == 1:
        return a
    idx: list[Any] = [slice(None)] * a.ndim
    idx[channel_axis] = slice(g.start, g.start + g.every * (g.size - 1) + 1, g.every)
    return a[tuple(idx)]


def _view(
    a: torch.Tensor, shape: list[int], g: ChannelGroup, axis: int, cax: int, shift: int, length: int
) -> torch.Tensor:
    v = group_view(tuple(a.stride()), tuple(shape), axis, cax, g, shift, length)
    return a.as_strided(v.shape, v.strides, a.storage_offset() + v.offset)


def _fractional_shear(
    out: torch.Tensor,
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> None:
    """Each group of channels with one fraction ``f``: ``(1 - f)`` of pixel ``w`` to
    ``n + w`` and ``f`` to ``n + 1 + w``, i.e. output ``n + w`` is a lerp of inputs
    ``w`` and ``w - 1``."""
    width, shape = x.shape[axis], list(x.shape)
    for g in _groups(out, offsets, fractions, axis, channel_axis):
        z = _select(x, channel_axis, g)
        assert z is not None
        m = _select(mask, channel_axis, g)
        z = z.to(out.dtype) if m is None else z * m
        f = g.fraction
        if f == 0:
            _view(out, shape, g, axis, channel_axis, 0, width).copy_(z)
            continue
        _view(out, shape, g, axis, channel_axis, 0, 1).copy_(z.narrow(axis, 0, 1) * (1 - f))
        last = z.narrow(axis, width - 1, 1) * f
        _view(out, shape, g, axis, channel_axis, width, 1).copy_(last)
        if width > 1:
            later, earlier = z.narrow(axis, 1, width - 1), z.narrow(axis, 0, width - 1)
            dst = _view(out, shape, g, axis, channel_axis, 1, width - 1)
            torch.lerp(later, earlier, f, out=dst)


def _fractional_unshear(
    out: torch.Tensor,
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> None:
    """``(1 - f) * y[n + w] + f * y[n + 1 + w]`` per group of channels, then the mask."""
    width, shape = out.shape[axis], list(out.shape)
    for g in _groups(y, offsets, fractions, axis, channel_axis):
        dst = _select(out, channel_axis, g)
        assert dst is not None
        now = _view(y, shape, g, axis, channel_axis, 0, width)
        if g.fraction == 0:
            dst.copy_(now)
        else:
            after = _view(y, shape, g, axis, channel_axis, 1, width)
            if now.dtype != out.dtype:
                now, after = now.to(out.dtype), after.to(out.dtype)
            torch.lerp(now, after, g.fraction, out=dst)
        m = _select(mask, channel_axis, g)
        if m is not None:
            dst.mul_(m)


def _shape_after(shape: list[int], axis: int, change: int) -> list[int]:
    out = list(shape)
    out[axis] += change
    return out


@torch.library.custom_op("portops::shear", mutates_args=())
def shear_op(
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """The sheared cube; `fractions` is empty for integer dispersion."""
    return _shear_kernel(x, offsets, fractions, axis, channel_axis, mask)


@shear_op.register_fake
def _(
    x: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    shape = _shape_after(list(x.shape), axis, _growth(offsets, fractions))
    return x.new_empty(shape, dtype=_result_dtype(x, mask))


@torch.library.custom_op("portops::unshear", mutates_args=())
def unshear_op(
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Every channel's window of the sheared cube `y`, times the conjugated mask."""
    return _unshear_kernel(y, offsets, fractions, axis, channel_axis, mask)


@unshear_op.register_fake
def _(
    y: torch.Tensor,
    offsets: list[int],
    fractions: list[float],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    shape = _shape_after(list(y.shape), axis, -_growth(offsets, fractions))
    return y.new_empty(shape, dtype=_result_dtype(y, mask))


def _reduce_to(grad: torch.Tensor, like_shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    grad = grad.sum_to_size(like_shape)
    if not dtype.is_complex and grad.is_complex():
        grad = grad.real
    return grad.to(dtype)


def _grads(
    shear_fn: Any,
    unshear_fn: Any,
    forward_is_shear: bool,
    needs: tuple[bool, bool],
    saved: tuple[torch.Tensor | None, torch.Tensor | None],
    geometry: tuple[Any, ...],
    arr_dtype: torch.dtype,
    mask_dtype: torch.dtype | None,
    grad: torch.Tensor,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Gradients in the array and the mask, for either direction.

    ``out = S(m * x)``: ``grad_x = conj(m) * S^H g``, ``grad_m = conj(x) * S^H g``.
    ``out = conj(m) * S^H y``: ``grad_y = S(m * g)``, ``grad_m = conj(g) * S^H y``.
    """
    arr, mask = saved
    grad_arr = grad_mask = None
    if forward_is_shear:
        if needs[0]:
            grad_arr = unshear_fn(grad, *geometry, mask).to(arr_dtype)
        if mask is not None and needs[1]:
            assert arr is not None and mask_dtype is not None
            u = unshear_fn(grad, *geometry, None)
            grad_mask = _reduce_to(u * arr.conj(), mask.shape, mask_dtype)
    else:
        if needs[0]:
            grad_arr = shear_fn(grad, *geometry, mask).to(arr_dtype)
        if mask is not None and needs[1]:
            assert arr is not None and mask_dtype is not None
            u = unshear_fn(arr, *geometry, None)
            grad_mask = _reduce_to(grad.conj() * u, mask.shape, mask_dtype)
    return grad_arr, grad_mask


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    arr, offsets, fractions, axis, channel_axis, mask = inputs
    ctx.geometry = (offsets, fractions, axis, channel_axis)
    ctx.arr_dtype = arr.dtype
    ctx.mask_dtype = None if mask is None else mask.dtype
    ctx.save_for_backward(arr if mask is not None else None, mask)


def _shear_op_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[5])
    g_arr, g_mask = _grads(
        shear_op, unshear_op, True, needs, ctx.saved_tensors, ctx.geometry,
        ctx.arr_dtype, ctx.mask_dtype, grad,
    )  # fmt: skip
    return g_arr, None, None, None, None, g_mask


def _unshear_op_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[5])
    g_arr, g_mask = _grads(
        shear_op, unshear_op, False, needs, ctx.saved_tensors, ctx.geometry,
        ctx.arr_dtype, ctx.mask_dtype, grad,
    )  # fmt: skip
    return g_arr, None, None, None, None, g_mask


shear_op.register_autograd(_shear_op_backward, setup_context=_setup)
unshear_op.register_autograd(_unshear_op_backward, setup_context=_setup)


class _Shear(torch.autograd.Function):
    """Eager autograd for shear: the kernels called directly, backward = unshear."""

    @staticmethod
    def forward(arr: torch.Tensor, mask: torch.Tensor | None, *geometry: Any) -> Any:
        offsets, fractions, axis, channel_axis = geometry
        return _shear_kernel(arr, offsets, fractions, axis, channel_axis, mask)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        arr, mask, *geometry = inputs
        _remember(ctx, arr, mask, geometry)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return _function_backward(ctx, grad, forward_is_shear=True)


class _Unshear(torch.autograd.Function):
    """Eager autograd for unshear: the kernels called directly, backward = shear."""

    @staticmethod
    def forward(arr: torch.Tensor, mask: torch.Tensor | None, *geometry: Any) -> Any:
        offsets, fractions, axis, channel_axis = geometry
        return _unshear_kernel(arr, offsets, fractions, axis, channel_axis, mask)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        arr, mask, *geometry = inputs
        _remember(ctx, arr, mask, geometry)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return _function_backward(ctx, grad, forward_is_shear=False)


def _remember(ctx: Any, arr: torch.Tensor, mask: torch.Tensor | None, geometry: Any) -> None:
    ctx.geometry = tuple(geometry)
    ctx.arr_dtype = arr.dtype
    ctx.mask_dtype = None if mask is None else mask.dtype
    ctx.save_for_backward(arr if mask is not None else None, mask)


def _apply_shear(arr: torch.Tensor, *rest: Any) -> torch.Tensor:
    *geometry, mask = rest
    out: torch.Tensor = _Shear.apply(arr, mask, *geometry)  # type: ignore[no-untyped-call]
    return out


def _apply_unshear(arr: torch.Tensor, *rest: Any) -> torch.Tensor:
    *geometry, mask = rest
    out: torch.Tensor = _Unshear.apply(arr, mask, *geometry)  # type: ignore[no-untyped-call]
    return out


def _function_backward(ctx: Any, grad: torch.Tensor, *, forward_is_shear: bool) -> tuple[Any, ...]:
    needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1])
    g_arr, g_mask = _grads(
        _apply_shear, _apply_unshear, forward_is_shear, needs, ctx.saved_tensors,
        ctx.geometry, ctx.arr_dtype, ctx.mask_dtype, grad,
    )  # fmt: skip
    return (g_arr, g_mask) + (None,) * len(ctx.geometry)


def _needs_grad(a: ShearArgs) -> bool:
    if not torch.is_grad_enabled():
        return False
    return a.array.requires_grad or (a.mask is not None and a.mask.requires_grad)


def _compiling() -> bool:
    """Whether torch.compile is tracing (the custom ops are what it sees)."""
    return torch.compiler.is_compiling()


def _call(a: ShearArgs, kernel: Any, function: Any, op: Any) -> torch.Tensor:
    args = (list(a.offsets), list(a.fractions or ()), a.axis, a.channel_axis)
    if _compiling():
        traced: torch.Tensor = op(a.array, *args, a.mask)
        return traced
    if _needs_grad(a):
        grad: torch.Tensor = function.apply(a.array, a.mask, *args)
        return grad
    out: torch.Tensor = kernel(a.array, *args, a.mask)
    return out


def shear(a: ShearArgs) -> torch.Tensor:
    """Zero the gaps, then one strided ``copy_`` of ``x`` into the windows; differentiable."""
    return _call(a, _shear_kernel, _Shear, shear_op)


def unshear(a: ShearArgs) -> torch.Tensor:
    """One strided copy of every window of ``y`` (mask fused); differentiable."""
    return _call(a, _unshear_kernel, _Unshear, unshear_op)


extend.register(
    "shear",
    "torch_strided",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    summary="strided zero-fill and one copy_ into the windows' view; autograd, custom op",
)(shear)
extend.register(
    "unshear",
    "torch_strided",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    summary="one copy_ of the windows' strided view, mask fused; autograd, custom op",
)(unshear)
