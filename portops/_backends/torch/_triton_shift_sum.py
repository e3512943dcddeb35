"""Triton kernels of the shift_sum family for torch CUDA tensors: the gather
formulation of ``_kernels/shift_sum.cu`` (no atomics, mask fused), row and general kernels.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from ..._kernels.geometry import (
    RowView,
    contiguous_strides,
    geometry,
    inverse_phi_rows,
    linear_step,
    row_block,
    row_view,
    row_warps,
)
from ..._tables import CUDA
from ._triton_launch import ACCUMULATOR, Launcher
from .linear_op import result_dtype
from .shift_sum import x_shape, y_shape

__all__ = ["plan_adjoint", "plan_forward", "plan_pinv"]


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
    return t // s1, t % s1, k2, k3, k4, k5


@triton.jit
def _forward_kernel(
    x_ptr, m_ptr, y_ptr, table_ptr,
    s0, s1, s2, s3, s4, s5,
    x0, x1, x2, x3, x4, x5, xc,
    m0, m1, m2, m3, m4, m5, mc,
    channels: tl.constexpr, out_width, step, base, total,
    HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr, X_COMPLEX: tl.constexpr,
    M_COMPLEX: tl.constexpr, ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """y = sum_c x[c, w - o_c] (times the mask), any strides, complex as pairs of reals."""
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
def _row_program(s1, s2, LARGE: tl.constexpr, BLOCK: tl.constexpr):
    """(k0, k1, k2) of this program's row (outer dims) and its block of columns `j`: the
    shifted axis merged with the contiguous ones after it (channel c moves o_c * I)."""
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if LARGE:
        row = row.to(tl.int64)
        j = j.to(tl.int64)
    k2 = row % s2
    t = row // s2
    return t // s1, t % s1, k2, j


@triton.jit
def _forward_rows(
    x_ptr, m_ptr, y_ptr, table_ptr,
    s1, s2, x0, x1, x2, xc, m0, m1, m2, mc, mj, y0, y1, y2,
    width, out_width, step, base,
    CHANNELS: tl.constexpr, HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr,
    INVERSE_PHI: tl.constexpr, ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """y[j] = sum_c x[c, j - o_c] (times the mask). INVERSE_PHI (x unread): 1 / Phi, 0
    where Phi == 0, Phi = sum_c mask[c, j - o_c]^2 or the number of channels reaching j."""
    k0, k1, k2, j = _row_program(s1, s2, LARGE, BLOCK)
    valid = j < out_width
    xb = x_ptr + (k0 * x0 + k1 * x1 + k2 * x2)
    mb = m_ptr + (k0 * m0 + k1 * m1 + k2 * m2)
    acc = tl.zeros([BLOCK], dtype=ACC)
    for c in tl.static_range(CHANNELS):
        src = j - _offset(table_ptr, c, step, base, HAS_TABLE)
        ok = valid & (src >= 0) & (src < width)
        if HAS_MASK:
            m = tl.load(mb + c * mc + src * mj, mask=ok, other=0).to(ACC)
        if INVERSE_PHI:
            if HAS_MASK:
                acc += m * m
            else:
                acc += ok.to(ACC)
        else:
            v = tl.load(xb + c * xc + src, mask=ok, other=0).to(ACC)
            if HAS_MASK:
                v = v * m
            acc += v
    if INVERSE_PHI:
        positive = acc > 0
        acc = tl.where(positive, 1.0 / tl.where(positive, acc, 1.0), 0.0)
    yb = y_ptr + (k0 * y0 + k1 * y1 + k2 * y2)
    tl.store(yb + j, acc.to(y_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _adjoint_rows(
    y_ptr, m_ptr, q_ptr, x_ptr, table_ptr,
    s1, s2, y0, y1, y2, m0, m1, m2, mc, mj, q0, q1, q2, x0, x1, x2, xc,
    width, step, base,
    CHANNELS: tl.constexpr, HAS_MASK: tl.constexpr, MASK_PER_CHANNEL: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_TABLE: tl.constexpr, ACC: tl.constexpr,
    LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """x[c, j] = y[j + o_c] (times scale[j + o_c]) (times mask[c, j])."""
    k0, k1, k2, j = _row_program(s1, s2, LARGE, BLOCK)
    valid = j < width
    yb = y_ptr + (k0 * y0 + k1 * y1 + k2 * y2)
    qb = q_ptr + (k0 * q0 + k1 * q1 + k2 * q2)
    mb = m_ptr + (k0 * m0 + k1 * m1 + k2 * m2) + j * mj
    xb = x_ptr + (k0 * x0 + k1 * x1 + k2 * x2) + j
    ty = x_ptr.dtype.element_ty
    if HAS_MASK and not MASK_PER_CHANNEL:
        shared = tl.load(mb, mask=valid, other=0).to(ACC)
    for c in tl.static_range(CHANNELS):
        pos = j + _offset(table_ptr, c, step, base, HAS_TABLE)
        v = tl.load(yb + pos, mask=valid, other=0).to(ACC)
        if HAS_SCALE:
            v = v * tl.load(qb + pos, mask=valid, other=0).to(ACC)
        if HAS_MASK:
            if MASK_PER_CHANNEL:
                v = v * tl.load(mb + c * mc, mask=valid, other=0).to(ACC)
            else:
                v = v * shared
        tl.store(xb + c * xc, v.to(ty), mask=valid)


_MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension
_ROW_DTYPES = frozenset(ACCUMULATOR) - {torch.complex64, torch.complex128}


@functools.lru_cache(maxsize=64)
def _table(
    offsets: tuple[int, ...], device: torch.device, scale: int = 1
) -> tuple[Any, int, int, bool]:
    """(table or a placeholder, step, base, has_table) for the kernels, in units of `scale`:
    irregular offsets are uploaded once per device."""
    lin = linear_step(offsets)
    if lin is not None:
        return _dummy(device), lin[0] * scale, lin[1] * scale, False
    table = torch.tensor([o * scale for o in offsets], dtype=torch.int64, device=device)
    return table, 0, 0, True


@functools.cache
def _dummy(device: torch.device) -> torch.Tensor:
    """A placeholder pointer for arguments a kernel does not read (no mask, no table)."""
    return torch.empty(4, dtype=torch.float32, device=device)


def _reals(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], bool]:
    """A tensor Triton can load (complex as pairs of reals), strides in its elements."""
    if t.is_complex():
        r = torch.view_as_real(t.resolve_conj())
        return r, tuple(r.stride()[:-1]), True  # already in reals
    return t, tuple(t.stride()), False


def _mask_layout(mask: torch.Tensor | None) -> tuple[tuple[int, ...] | None, bool]:
    """The mask's strides in reals, 0 where it broadcasts, and whether it is complex."""
    if mask is None:
        return None, False
    _, strides, is_complex = _reals(mask)
    return tuple(0 if n == 1 else s for n, s in zip(mask.shape, strides, strict=True)), is_complex


def _row_launcher(
    kernel: Any,
    rows: int,
    columns: int,
    scalars: tuple[int, ...],
    device: torch.device,
    **constexprs: Any,
) -> Launcher | None:
    """`kernel` with a program per row and block of `columns`; None past CUDA's grid."""
    block = row_block(columns)
    blocks = triton.cdiv(columns, block)
    if blocks > _MAX_GRID_Y:
        return None
    options = dict(constexprs, BLOCK=block, num_warps=row_warps(block))
    return Launcher(kernel, (rows, blocks, 1), scalars, options, device.index)


# A plan is a function of the call's tensors, everything else fixed.
Run = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


class _Call(NamedTuple):
    """A call's signature: `a` is x, or y with a channel axis of 1; the result has
    `shape` (channel axis kept) and is allocated as `alloc` (same elements, same order)."""

    a: torch.Tensor
    offsets: tuple[int, ...]
    axis: int
    cax: int
    mask: torch.Tensor | None
    shape: list[int]
    alloc: list[int]
    dtype: torch.dtype


def _rows(
    c: _Call, big_shape: list[int], big: tuple[int, ...], small: tuple[int, ...], out_width: int
) -> RowView | None:
    """The row kernels' view of the call's layout, or None when they do not cover it."""
    mask, dtypes = c.mask, (c.a.dtype, c.dtype)
    if not _ROW_DTYPES.issuperset(dtypes if mask is None else (*dtypes, mask.dtype)):
        return None
    g = geometry(tuple(big_shape), big, small, _mask_layout(mask)[0], c.axis, c.cax, out_width)
    return None if g is None else row_view(g, mask is not None)


def _row_forward(c: _Call) -> Run | None:
    x, mask, dtype, alloc = c.a, c.mask, c.dtype, c.alloc
    r = _rows(c, list(x.shape), tuple(x.stride()), contiguous_strides(c.shape), c.shape[c.axis])
    if r is None:
        return None
    device = x.device
    table, step, base, has_table = _table(c.offsets, device, r.inner)
    launch = _row_launcher(
        _forward_rows, r.rows, r.out_width,
        (r.s1, r.s2, *r.big, r.big_c, *r.mask, r.mask_c, r.mask_j, *r.small,
         r.width, r.out_width, step, base),
        device, CHANNELS=len(c.offsets), HAS_MASK=mask is not None, HAS_TABLE=has_table,
        INVERSE_PHI=False, ACC=ACCUMULATOR[dtype], LARGE=r.large,
    )  # fmt: skip
    if launch is None:
        return None
    dummy = _dummy(device)

    def run(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = torch.empty(alloc, dtype=dtype, device=device)
        launch(x, dummy if mask is None else mask, y, table)
        return y

    return run


def _row_adjoint(c: _Call, pinv: bool = False) -> Run | None:
    """The adjoint; `pinv`: ``conj(mask) * window_c(y / Phi)``, 1 / Phi by the forward
    kernel first (once per plan without a mask, else over the mask's outer shape)."""
    y, mask, dtype, alloc = c.a, c.mask, c.dtype, c.alloc
    if pinv and not dtype.is_floating_point:
        return None
    r = _rows(c, c.shape, contiguous_strides(c.shape), tuple(y.stride()), y.shape[c.axis])
    if r is None:
        return None
    device = y.device
    table, step, base, has_table = _table(c.offsets, device, r.inner)
    phi_rows, q = inverse_phi_rows(r, mask is not None)
    launch = _row_launcher(
        _adjoint_rows, r.rows, r.width,
        (r.s1, r.s2, *r.small, *r.mask, r.mask_c, r.mask_j, *(q if pinv else (0, 0, 0)),
         *r.big, r.big_c, r.width, step, base),
        device, CHANNELS=len(c.offsets), HAS_MASK=mask is not None,
        MASK_PER_CHANNEL=mask is not None and r.mask_c != 0, HAS_SCALE=pinv,
        HAS_TABLE=has_table, ACC=ACCUMULATOR[dtype], LARGE=r.large,
    )  # fmt: skip
    if launch is None:
        return None
    dummy = _dummy(device)

    def adjoint(y: torch.Tensor, mask: torch.Tensor | None, scale: Any = dummy) -> torch.Tensor:
        out = torch.empty(alloc, dtype=dtype, device=device)
        launch(y, dummy if mask is None else mask, scale, out, table)
        return out

    if not pinv:
        return adjoint
    phi_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    phi_launch = _row_launcher(
        _forward_rows, phi_rows.rows, r.out_width,
        (phi_rows.s1, phi_rows.s2, 0, 0, 0, 0, *phi_rows.mask, r.mask_c, r.mask_j, *q,
         r.width, r.out_width, step, base),
        device, CHANNELS=len(c.offsets), HAS_MASK=mask is not None, HAS_TABLE=has_table,
        INVERSE_PHI=True, ACC=ACCUMULATOR[phi_dtype], LARGE=r.large,
    )  # fmt: skip
    if phi_launch is None:
        return None
    q_shape = (phi_rows.rows, r.out_width)
    if mask is None:
        inverse_count = torch.empty(q_shape, dtype=phi_dtype, device=device)
        phi_launch(dummy, dummy, inverse_count, table)
        return lambda y, mask: adjoint(y, None, inverse_count)

    def run(y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        assert mask is not None
        inverse_phi = torch.empty(q_shape, dtype=phi_dtype, device=device)
        phi_launch(dummy, mask, inverse_phi, table)
        return adjoint(y, mask, inverse_phi)

    return run


def _general_forward(c: _Call) -> Run:
    x, mask, dtype, alloc, shape = c.a, c.mask, c.dtype, c.alloc, c.shape
    device = x.device
    numel = math.prod(shape)
    if numel == 0 or x.numel() == 0:
        return lambda x, mask: torch.zeros(alloc, dtype=dtype, device=device)
    _, xs, x_complex = _reals(x)
    ms, m_complex = _mask_layout(mask)
    g = geometry(tuple(x.shape), xs, contiguous_strides(shape), ms, c.axis, c.cax,
                 shape[c.axis])  # fmt: skip
    if g is None:
        raise NotImplementedError("layout needs more than 3 outer and 2 inner dimensions")
    table, step, base, has_table = _table(c.offsets, device)
    block = CUDA["general_block"]
    launch = Launcher(
        _forward_kernel, (triton.cdiv(numel, block), 1, 1),
        (*g.size, *g.big, g.big_c, *g.mask, g.mask_c, g.channels, g.out_width, step, base,
         numel),
        dict(HAS_MASK=mask is not None, HAS_TABLE=has_table, X_COMPLEX=x_complex,
             M_COMPLEX=m_complex, ACC=ACCUMULATOR[dtype], LARGE=g.large, BLOCK=block),
        device.index,
    )  # fmt: skip
    dummy = _dummy(device)

    def run(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = torch.empty(alloc, dtype=dtype, device=device)
        launch(_reals(x)[0], dummy if mask is None else _reals(mask)[0], _reals(y)[0], table)
        return y

    return run


def _planner(kind: str) -> Callable[..., Run]:
    forward = kind == "forward"
    row = _row_forward if forward else functools.partial(_row_adjoint, pinv=kind == "pinv")

    def plan(
        a: torch.Tensor,
        offsets: tuple[int, ...],
        axis: int,
        cax: int,
        mask: torch.Tensor | None,
        out_shape: list[int] | None = None,
        *,
        general_kernel: bool = False,
    ) -> Run:
        """The plan for tensors laid out like `a` and `mask` (row kernel, else general)."""
        shape = (y_shape if forward else x_shape)(list(a.shape), (list(offsets), axis, cax))
        alloc = shape if out_shape is None else out_shape
        c = _Call(a, offsets, axis, cax, mask, shape, alloc, result_dtype(a, mask))
        if not general_kernel and a.numel() and (mask is None or mask.numel()):
            run = row(c)
            if run is not None:
                return run
        if forward:
            return _general_forward(c)
        raise NotImplementedError("the row kernels do not cover this layout or dtype")

    return plan


plan_forward = _planner("forward")
plan_adjoint = _planner("adjoint")
plan_pinv = _planner("pinv")
