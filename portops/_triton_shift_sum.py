"""Triton kernels of the shift_sum family for torch CUDA tensors.

The same gather formulation as ``_kernels/shift_sum.cu``: one program element per
output element, a loop over the channels that reach it, the mask fused, no atomics,
accumulation in float32 for half precision. Layouts are reduced to the six dimensions
of :mod:`portops._geometry` and read through their strides. Complex tensors are read
as pairs of reals (``view_as_real``), so complex64/complex128 need no special types.

Imported only when a CUDA tensor reaches the torch backend (or by the tests, which run
these kernels on CPU tensors under ``TRITON_INTERPRET=1``): CPU users never need Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ._backends.torch.shift_sum import result_dtype, x_shape, y_shape
from ._geometry import Geometry, contiguous_strides, geometry, linear_step

__all__ = ["adjoint", "forward", "pinv"]

_BLOCK = 512
_ACC = {
    torch.float16: tl.float32,
    torch.bfloat16: tl.float32,
    torch.float32: tl.float32,
    torch.float64: tl.float64,
    torch.complex64: tl.float32,
    torch.complex128: tl.float64,
    torch.int8: tl.int8,
    torch.int16: tl.int16,
    torch.int32: tl.int32,
    torch.int64: tl.int64,
    torch.uint8: tl.uint8,
}


@triton.jit
def _coords(idx, s0, s1, s2, width, s4, s5):
    """Linear index -> coordinates over (O0, O1, O2, W, I0, I1), `width` for W."""
    k5 = idx % s5
    t = idx // s5
    k4 = t % s4
    t = t // s4
    k3 = t % width
    t = t // width
    k2 = t % s2
    t = t // s2
    k1 = t % s1
    k0 = t // s1
    return k0, k1, k2, k3, k4, k5


@triton.jit
def _offset(table_ptr, c, step, base, HAS_TABLE: tl.constexpr):
    if HAS_TABLE:
        return tl.load(table_ptr + c)
    else:
        return c * step + base


@triton.jit
def _load_pair(ptr, off, ok, COMPLEX: tl.constexpr, ACC: tl.constexpr):
    """(real, imag) at element offset `off` (in reals); imag is 0 for real tensors."""
    re = tl.load(ptr + off, mask=ok, other=0).to(ACC)
    if COMPLEX:
        im = tl.load(ptr + off + 1, mask=ok, other=0).to(ACC)
    else:
        im = tl.zeros_like(re)
    return re, im


@triton.jit
def _forward_kernel(
    x_ptr, m_ptr, y_ptr, table_ptr,
    s0, s1, s2, s3, s4, s5,
    x0, x1, x2, x3, x4, x5, xc,
    m0, m1, m2, m3, m4, m5, mc,
    channels, out_width, step, base, total,
    HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr, X_COMPLEX: tl.constexpr,
    M_COMPLEX: tl.constexpr, ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if LARGE:
        pid = pid.to(tl.int64)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    valid = idx < total
    k0, k1, k2, w, k4, k5 = _coords(idx, s0, s1, s2, out_width, s4, s5)
    xb = k0 * x0 + k1 * x1 + k2 * x2 + k4 * x4 + k5 * x5
    mb = k0 * m0 + k1 * m1 + k2 * m2 + k4 * m4 + k5 * m5
    acc_re = tl.zeros([BLOCK], dtype=ACC)
    acc_im = tl.zeros([BLOCK], dtype=ACC)
    for c in range(0, channels):
        src = w - _offset(table_ptr, c, step, base, HAS_TABLE)
        ok = valid & (src >= 0) & (src < s3)
        v_re, v_im = _load_pair(x_ptr, xb + c * xc + src * x3, ok, X_COMPLEX, ACC)
        if HAS_MASK:
            m_re, m_im = _load_pair(m_ptr, mb + c * mc + src * m3, ok, M_COMPLEX, ACC)
            if X_COMPLEX or M_COMPLEX:
                acc_re += v_re * m_re - v_im * m_im
                acc_im += v_re * m_im + v_im * m_re
            else:
                acc_re += v_re * m_re
        else:
            acc_re += v_re
            acc_im += v_im
    ty = y_ptr.dtype.element_ty
    if X_COMPLEX or M_COMPLEX:
        tl.store(y_ptr + 2 * idx, acc_re.to(ty), mask=valid)
        tl.store(y_ptr + 2 * idx + 1, acc_im.to(ty), mask=valid)
    else:
        tl.store(y_ptr + idx, acc_re.to(ty), mask=valid)


@triton.jit
def _adjoint_kernel(
    y_ptr, m_ptr, out_ptr, table_ptr,
    s0, s1, s2, s3, s4, s5,
    o0, o1, o2, o3, o4, o5, oc,
    m0, m1, m2, m3, m4, m5, mc,
    y0, y1, y2, y3, y4, y5,
    channels, step, base, total,
    HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr, Y_COMPLEX: tl.constexpr,
    M_COMPLEX: tl.constexpr, CHANNEL_FAST: tl.constexpr, BY_COUNT: tl.constexpr,
    ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if LARGE:
        pid = pid.to(tl.int64)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    valid = idx < total
    if CHANNEL_FAST:
        c = idx % channels
        rest = idx // channels
    else:
        per_channel = total // channels
        c = idx // per_channel
        rest = idx % per_channel
    k0, k1, k2, w, k4, k5 = _coords(rest, s0, s1, s2, s3, s4, s5)
    pos = w + _offset(table_ptr, c, step, base, HAS_TABLE)
    y_off = k0 * y0 + k1 * y1 + k2 * y2 + k4 * y4 + k5 * y5 + pos * y3
    v_re, v_im = _load_pair(y_ptr, y_off, valid, Y_COMPLEX, ACC)
    if HAS_MASK:
        m_off = k0 * m0 + k1 * m1 + k2 * m2 + k4 * m4 + k5 * m5 + c * mc + w * m3
        m_re, m_im = _load_pair(m_ptr, m_off, valid, M_COMPLEX, ACC)
        # times conj(mask)
        r_re = v_re * m_re + v_im * m_im
        r_im = v_im * m_re - v_re * m_im
    else:
        r_re = v_re
        r_im = v_im
    if BY_COUNT:
        n = tl.zeros([BLOCK], dtype=tl.int32)
        for d in range(0, channels):
            src = pos - _offset(table_ptr, d, step, base, HAS_TABLE)
            n += ((src >= 0) & (src < s3)).to(tl.int32)
        n = tl.maximum(n, 1).to(ACC)
        r_re = r_re / n
        r_im = r_im / n
    out = k0 * o0 + k1 * o1 + k2 * o2 + k4 * o4 + k5 * o5 + c * oc + w * o3
    ty = out_ptr.dtype.element_ty
    if Y_COMPLEX or M_COMPLEX:
        tl.store(out_ptr + out, r_re.to(ty), mask=valid)
        tl.store(out_ptr + out + 1, r_im.to(ty), mask=valid)
    else:
        tl.store(out_ptr + out, r_re.to(ty), mask=valid)


@triton.jit
def _pinv_divide_kernel(
    y_ptr, m_ptr, z_ptr, table_ptr,
    s0, s1, s2, s3, s4, s5,
    m0, m1, m2, m3, m4, m5, mc,
    y0, y1, y2, y3, y4, y5,
    channels, out_width, step, base, total,
    HAS_TABLE: tl.constexpr, Y_COMPLEX: tl.constexpr, M_COMPLEX: tl.constexpr,
    ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if LARGE:
        pid = pid.to(tl.int64)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    valid = idx < total
    k0, k1, k2, w, k4, k5 = _coords(idx, s0, s1, s2, out_width, s4, s5)
    mb = k0 * m0 + k1 * m1 + k2 * m2 + k4 * m4 + k5 * m5
    phi = tl.zeros([BLOCK], dtype=ACC)
    for c in range(0, channels):
        src = w - _offset(table_ptr, c, step, base, HAS_TABLE)
        ok = valid & (src >= 0) & (src < s3)
        m_re, m_im = _load_pair(m_ptr, mb + c * mc + src * m3, ok, M_COMPLEX, ACC)
        phi += m_re * m_re + m_im * m_im
    y_off = k0 * y0 + k1 * y1 + k2 * y2 + k4 * y4 + k5 * y5 + w * y3
    v_re, v_im = _load_pair(y_ptr, y_off, valid, Y_COMPLEX, ACC)
    positive = phi > 0
    safe = tl.where(positive, phi, 1)
    ty = z_ptr.dtype.element_ty
    if Y_COMPLEX:
        tl.store(z_ptr + 2 * idx, tl.where(positive, v_re / safe, 0).to(ty), mask=valid)
        tl.store(z_ptr + 2 * idx + 1, tl.where(positive, v_im / safe, 0).to(ty), mask=valid)
    else:
        tl.store(z_ptr + idx, tl.where(positive, v_re / safe, 0).to(ty), mask=valid)


# ----------------------------------------------------------------------------- host side

_tables: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def _table(offsets: tuple[int, ...], device: torch.device) -> tuple[Any, int, int, bool]:
    """(table or a placeholder, step, base, has_table) for the kernels."""
    lin = linear_step(offsets)
    if lin is not None:
        return _dummy(device), lin[0], lin[1], False
    key = (offsets, device)
    table = _tables.get(key)
    if table is None:  # irregular offsets: uploaded once per device
        table = torch.tensor(offsets, dtype=torch.int64, device=device)
        if len(_tables) < 64:
            _tables[key] = table
    return table, 0, 0, True


_dummies: dict[torch.device, torch.Tensor] = {}


def _dummy(device: torch.device) -> torch.Tensor:
    """A placeholder pointer for arguments a kernel does not read (no mask, no table)."""
    t = _dummies.get(device)
    if t is None:
        t = _dummies[device] = torch.empty(1, dtype=torch.float32, device=device)
    return t


def _reals(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], bool]:
    """A tensor Triton can load (complex as pairs of reals), strides in its elements."""
    if t.is_complex():
        r = torch.view_as_real(t.resolve_conj())
        return r, tuple(r.stride()[:-1]), True  # already in reals
    return t, tuple(t.stride()), False


def _mask_strides(mask: torch.Tensor, strides: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(0 if n == 1 else s for n, s in zip(mask.shape, strides, strict=True))


def _acc(dtype: torch.dtype) -> Any:
    return _ACC[dtype]


def _grid(total: int) -> tuple[int]:
    return (triton.cdiv(total, _BLOCK),)


def _geometry(
    big_shape: list[int],
    big: tuple[int, ...],
    small: tuple[int, ...],
    mask: tuple[int, ...] | None,
    axis: int,
    channel_axis: int,
    out_width: int,
) -> Geometry:
    g = geometry(tuple(big_shape), big, small, mask, axis, channel_axis, out_width)
    if g is None:
        raise NotImplementedError("layout needs more than 3 outer and 2 inner dimensions")
    return g


def forward(
    x: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """``y`` (channel axis kept with size 1) by one launch of the forward kernel."""
    shape = y_shape(list(x.shape), offsets, axis, channel_axis)
    y = torch.empty(shape, dtype=result_dtype(x, mask), device=x.device)
    if y.numel() == 0:
        return y
    if x.numel() == 0:
        return y.zero_()
    xr, xs, x_complex = _reals(x)
    if mask is None:
        mr, ms, m_complex = _dummy(x.device), None, False
    else:
        mr, mstr, m_complex = _reals(mask)
        ms = _mask_strides(mask, mstr)
    g = _geometry(list(x.shape), xs, contiguous_strides(shape), ms, axis, channel_axis, shape[axis])
    table, step, base, has_table = _table(tuple(offsets), x.device)
    yr = torch.view_as_real(y) if y.is_complex() else y
    _forward_kernel[_grid(y.numel())](
        xr, mr, yr, table,
        *g.size, *g.big, g.big_c, *g.mask, g.mask_c,
        g.channels, g.out_width, step, base, y.numel(),
        HAS_MASK=mask is not None, HAS_TABLE=has_table, X_COMPLEX=x_complex,
        M_COMPLEX=m_complex, ACC=_acc(y.dtype), LARGE=g.large, BLOCK=_BLOCK,
    )  # fmt: skip
    return y


def _adjoint_into(
    out: torch.Tensor,
    y: torch.Tensor,
    offsets: list[int],
    axis: int,
    channel_axis: int,
    mask: torch.Tensor | None,
    by_count: bool,
) -> None:
    yr, ys, y_complex = _reals(y)
    if mask is None:
        mr, ms, m_complex = _dummy(y.device), None, False
    else:
        mr, mstr, m_complex = _reals(mask)
        ms = _mask_strides(mask, mstr)
    outr, os_, _ = _reals(out)
    g = _geometry(list(out.shape), os_, ys, ms, axis, channel_axis, y.shape[axis])
    table, step, base, has_table = _table(tuple(offsets), y.device)
    channel_fast = contiguous_strides(out.shape)[channel_axis] == 1
    _adjoint_kernel[_grid(out.numel())](
        yr, mr, outr, table,
        *g.size, *g.big, g.big_c, *g.mask, g.mask_c, *g.small,
        g.channels, step, base, out.numel(),
        HAS_MASK=mask is not None, HAS_TABLE=has_table, Y_COMPLEX=y_complex,
        M_COMPLEX=m_complex, CHANNEL_FAST=channel_fast, BY_COUNT=by_count,
        ACC=_acc(out.dtype), LARGE=g.large, BLOCK=_BLOCK,
    )  # fmt: skip


def adjoint(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """``conj(mask) * window_c(y)`` by one launch of the adjoint kernel."""
    shape = x_shape(list(y.shape), offsets, axis, channel_axis)
    out = torch.empty(shape, dtype=result_dtype(y, mask), device=y.device)
    if out.numel():
        _adjoint_into(out, y, offsets, axis, channel_axis, mask, False)
    return out


def pinv(
    y: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """``A^H (y / Phi)``: one launch without a mask, two with one."""
    shape = x_shape(list(y.shape), offsets, axis, channel_axis)
    out_dtype = result_dtype(y, mask)
    out = torch.empty(shape, dtype=out_dtype, device=y.device)
    if out.numel() == 0:
        return out
    if mask is None:
        _adjoint_into(out, y, offsets, axis, channel_axis, None, True)
        return out
    # z = y / Phi is complex only when y is; its precision is that of the result (at
    # least float32).
    double = out_dtype in (torch.float64, torch.complex128)
    if y.is_complex():
        z_dtype = torch.complex128 if double else torch.complex64
    else:
        z_dtype = torch.float64 if double else torch.float32
    z = torch.empty(y.shape, dtype=z_dtype, device=y.device)
    yr, ys, y_complex = _reals(y)
    mr, mstr, m_complex = _reals(mask)
    ms = _mask_strides(mask, mstr)
    g = _geometry(shape, contiguous_strides(shape), ys, ms, axis, channel_axis, y.shape[axis])
    table, step, base, has_table = _table(tuple(offsets), y.device)
    zr = torch.view_as_real(z) if z.is_complex() else z
    _pinv_divide_kernel[_grid(z.numel())](
        yr, mr, zr, table,
        *g.size, *g.mask, g.mask_c, *g.small,
        g.channels, g.out_width, step, base, z.numel(),
        HAS_TABLE=has_table, Y_COMPLEX=y_complex, M_COMPLEX=m_complex,
        ACC=_acc(z_dtype), LARGE=g.large, BLOCK=_BLOCK,
    )  # fmt: skip
    _adjoint_into(out, z, offsets, axis, channel_axis, mask, False)
    return out
