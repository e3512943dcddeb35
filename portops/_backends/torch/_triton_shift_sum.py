"""Triton kernels of the shift_sum family for torch CUDA tensors.

The same gather formulation as ``_kernels/shift_sum.cu``: one program element per
output element, a loop over the channels that reach it, the mask fused, no atomics,
accumulation in float32 for half precision. Layouts are reduced to the six dimensions
of :mod:`portops._kernels.geometry` and read through their strides. Complex tensors are read
as pairs of reals (``view_as_real``), so complex64/complex128 need no special types.

Two families of kernels. The *row* kernels cover the common layouts — the channel axis
before the shifted one, and the shifted axis with the axes after it contiguous (the
``(B, C, H, W)`` of CASSI, shifted along W or H): each program owns one row of the
outer dimensions and a block of columns, does its index arithmetic once, and loops over
the channels (unrolled), so loads and stores are contiguous runs. The *general* kernels
take any strides and complex dtypes, at the price of index arithmetic per element.

The host side builds a :class:`Launcher` once per call signature (see
:mod:`portops._plans`): the grid, the scalar arguments and the compiled kernel are kept,
so a repeated call allocates its result and launches.

Imported only when a CUDA tensor reaches the torch backend (or by the tests, which run
these kernels on CPU tensors under ``TRITON_INTERPRET=1``): CPU users never need Triton.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..._kernels.geometry import (
    Geometry,
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
from .shift_sum import result_dtype, x_shape, y_shape

__all__ = ["plan_adjoint", "plan_forward", "plan_pinv"]


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
    channels: tl.constexpr, out_width, step, base, total,
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
    channels: tl.constexpr, step, base, total,
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
    channels: tl.constexpr, out_width, step, base, total,
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


# ----------------------------------------------------------------------------- row kernels
# Columns j index the shifted axis merged with the contiguous axes after it (W * I of
# them in x, W' * I in y); channel c is shifted by o_c * I columns. Rows index the outer
# dims (O0, O1, O2), each with its own strides per array.


@triton.jit
def _row(row, s1, s2):
    k2 = row % s2
    t = row // s2
    return t // s1, t % s1, k2


@triton.jit
def _forward_rows(
    x_ptr, m_ptr, y_ptr, table_ptr,
    s1, s2, x0, x1, x2, xc, m0, m1, m2, mc, mj, y0, y1, y2,
    width, out_width, step, base,
    CHANNELS: tl.constexpr, HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr,
    ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if LARGE:
        row = row.to(tl.int64)
        j = j.to(tl.int64)
    k0, k1, k2 = _row(row, s1, s2)
    valid = j < out_width
    xb = x_ptr + (k0 * x0 + k1 * x1 + k2 * x2)
    mb = m_ptr + (k0 * m0 + k1 * m1 + k2 * m2)
    acc = tl.zeros([BLOCK], dtype=ACC)
    for c in tl.static_range(CHANNELS):
        src = j - _offset(table_ptr, c, step, base, HAS_TABLE)
        ok = valid & (src >= 0) & (src < width)
        v = tl.load(xb + c * xc + src, mask=ok, other=0).to(ACC)
        if HAS_MASK:
            v = v * tl.load(mb + c * mc + src * mj, mask=ok, other=0).to(ACC)
        acc += v
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
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if LARGE:
        row = row.to(tl.int64)
        j = j.to(tl.int64)
    k0, k1, k2 = _row(row, s1, s2)
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


@triton.jit
def _inverse_phi_rows(
    m_ptr, q_ptr, table_ptr,
    s1, s2, m0, m1, m2, mc, mj, q0, q1, q2,
    width, out_width, step, base,
    CHANNELS: tl.constexpr, HAS_MASK: tl.constexpr, HAS_TABLE: tl.constexpr,
    ACC: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """1 / Phi (0 where Phi == 0), Phi = sum_c mask[c, j - o_c]^2 or the channel count."""
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if LARGE:
        row = row.to(tl.int64)
        j = j.to(tl.int64)
    k0, k1, k2 = _row(row, s1, s2)
    valid = j < out_width
    mb = m_ptr + (k0 * m0 + k1 * m1 + k2 * m2)
    phi = tl.zeros([BLOCK], dtype=ACC)
    for c in tl.static_range(CHANNELS):
        src = j - _offset(table_ptr, c, step, base, HAS_TABLE)
        ok = valid & (src >= 0) & (src < width)
        if HAS_MASK:
            m = tl.load(mb + c * mc + src * mj, mask=ok, other=0).to(ACC)
            phi += m * m
        else:
            phi += ok.to(ACC)
    positive = phi > 0
    inv = tl.where(positive, 1.0 / tl.where(positive, phi, 1.0), 0.0)
    qb = q_ptr + (k0 * q0 + k1 * q1 + k2 * q2)
    tl.store(qb + j, inv.to(q_ptr.dtype.element_ty), mask=valid)


# ----------------------------------------------------------------------------- launching

_MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension
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
_ROW_DTYPES = frozenset(
    {
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
    }
)


_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})


def _hooks_idle() -> bool:
    """True when no Triton launch hook is installed (profilers install them)."""
    try:
        from triton import knobs

        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    except (ImportError, AttributeError):
        return False
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


def _misaligned(tensors: tuple[torch.Tensor, ...]) -> int:
    """Nonzero when a tensor's data is not 16-byte aligned (Triton specialises on it)."""
    bits = 0
    for t in tensors:
        bits |= t.data_ptr()
    return bits & 15


# Capability checks: torch's private fast readers where present, public ones elsewhere.
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_raw_stream = getattr(
    torch._C,
    "_cuda_getCurrentRawStream",
    lambda device: torch.cuda.current_stream(device).cuda_stream,
)


def _fast_launch_ready(compiled: Any) -> bool:
    return all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata"))


class Launcher:
    """One kernel with its grid, scalar arguments and constexprs fixed.

    Calling it with the tensor arguments launches the kernel. The first launch goes
    through Triton's JIT (which compiles and specialises on the arguments); later
    launches call the compiled kernel's launcher directly when every tensor is 16-byte
    aligned like the first (the one specialisation that varies between calls of one
    signature) and no launch hook is installed, skipping the JIT's per-call work.
    """

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
        # The launcher takes every kernel parameter in order, constexprs included (it
        # ignores them); launch options such as num_warps are not parameters.
        params = [v for k, v in constexprs.items() if k not in _LAUNCH_OPTIONS]
        self.tail = (*scalars, *params)
        self.n_scalars = len(scalars)
        self.compiled: Any = None
        self.device = -1 if device is None else device

    def __call__(self, *tensors: torch.Tensor) -> None:
        compiled = self.compiled
        if compiled is not None and not _misaligned(tensors):
            if _current_device() == self.device:
                g = self.grid
                stream = _raw_stream(self.device)
                compiled.run(
                    g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata,
                    None, None, None, *tensors, *self.tail,
                )  # fmt: skip
                return
        n = self.n_scalars
        if self.device < 0:  # CPU tensors: Triton's interpreter (tests)
            result = self.kernel[self.grid](*tensors, *self.tail[:n], **self.constexprs)
        else:
            with torch.cuda.device(self.device):
                result = self.kernel[self.grid](*tensors, *self.tail[:n], **self.constexprs)
        if compiled is None and not _misaligned(tensors) and _fast_launch_ready(result):
            if not _hooks_idle():
                return
            self.compiled = result


_tables: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}


def _table(
    offsets: tuple[int, ...], device: torch.device, scale: int = 1
) -> tuple[Any, int, int, bool]:
    """(table or a placeholder, step, base, has_table) for the kernels, in units of `scale`."""
    lin = linear_step(offsets)
    if lin is not None:
        return _dummy(device), lin[0] * scale, lin[1] * scale, False
    scaled = tuple(o * scale for o in offsets)
    key = (scaled, device)
    table = _tables.get(key)
    if table is None:  # irregular offsets: uploaded once per device
        table = torch.tensor(scaled, dtype=torch.int64, device=device)
        if len(_tables) < 64:
            _tables[key] = table
    return table, 0, 0, True


_dummies: dict[torch.device, torch.Tensor] = {}


def _dummy(device: torch.device) -> torch.Tensor:
    """A placeholder pointer for arguments a kernel does not read (no mask, no table)."""
    t = _dummies.get(device)
    if t is None:
        t = _dummies[device] = torch.empty(4, dtype=torch.float32, device=device)
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


def _grid(total: int) -> tuple[int, int, int]:
    return (triton.cdiv(total, CUDA["general_block"]), 1, 1)


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


def _row_grid(r: RowView, columns: int, block: int) -> tuple[int, int, int] | None:
    blocks = triton.cdiv(columns, block)
    if blocks > _MAX_GRID_Y:
        return None
    return (r.rows, blocks, 1)


# ----------------------------------------------------------------------------- plans
# Each plan_* function returns a function of the call's tensors (channel axis of the
# result kept with size 1) with everything else fixed, or None when the row kernels do
# not cover the layout (the caller then uses the general kernels).

Run = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


def _row_forward(
    x: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run | None:
    shape = y_shape(list(x.shape), (list(offsets), axis, cax))
    dtype = result_dtype(x, mask)
    if x.dtype not in _ROW_DTYPES or dtype not in _ROW_DTYPES:
        return None
    if mask is not None and mask.dtype not in _ROW_DTYPES:
        return None
    ms = None if mask is None else _mask_strides(mask, tuple(mask.stride()))
    g = geometry(
        tuple(x.shape), tuple(x.stride()), contiguous_strides(shape), ms, axis, cax, shape[axis]
    )
    if g is None:
        return None
    r = row_view(g, mask is not None)
    if r is None:
        return None
    block = row_block(r.out_width)
    grid = _row_grid(r, r.out_width, block)
    if grid is None:
        return None
    device = x.device
    table, step, base, has_table = _table(offsets, device, r.inner)
    launch = Launcher(
        _forward_rows,
        grid,
        (r.s1, r.s2, *r.big, r.big_c, *r.mask, r.mask_c, r.mask_j, *r.small,
         r.width, r.out_width, step, base),
        dict(CHANNELS=len(offsets), HAS_MASK=mask is not None, HAS_TABLE=has_table,
             ACC=_acc(dtype), LARGE=r.large, BLOCK=block, num_warps=row_warps(block)),
        device.index,
    )  # fmt: skip
    dummy = _dummy(device)

    alloc = shape if out_shape is None else out_shape

    def run(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = torch.empty(alloc, dtype=dtype, device=device)
        launch(x, dummy if mask is None else mask, y, table)
        return y

    return run


def _row_adjoint(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    scale: Any = None,
    out_shape: list[int] | None = None,
) -> Callable[..., torch.Tensor] | None:
    """The adjoint, optionally times ``scale`` (1 / Phi, y-shaped or broadcast)."""
    shape = x_shape(list(y.shape), (list(offsets), axis, cax))
    dtype = result_dtype(y, mask)
    if y.dtype not in _ROW_DTYPES or dtype not in _ROW_DTYPES:
        return None
    if mask is not None and mask.dtype not in _ROW_DTYPES:
        return None
    ms = None if mask is None else _mask_strides(mask, tuple(mask.stride()))
    xs = contiguous_strides(shape)
    g = geometry(tuple(shape), xs, tuple(y.stride()), ms, axis, cax, y.shape[axis])
    if g is None:
        return None
    r = row_view(g, mask is not None)
    if r is None:
        return None
    block = row_block(r.width)
    grid = _row_grid(r, r.width, block)
    if grid is None:
        return None
    device = y.device
    table, step, base, has_table = _table(offsets, device, r.inner)
    q = (0, 0, 0) if scale is None else scale
    launch = Launcher(
        _adjoint_rows,
        grid,
        (r.s1, r.s2, *r.small, *r.mask, r.mask_c, r.mask_j, *q, *r.big, r.big_c,
         r.width, step, base),
        dict(CHANNELS=len(offsets), HAS_MASK=mask is not None,
             MASK_PER_CHANNEL=mask is not None and r.mask_c != 0,
             HAS_SCALE=scale is not None, HAS_TABLE=has_table, ACC=_acc(dtype),
             LARGE=r.large, BLOCK=block, num_warps=row_warps(block)),
        device.index,
    )  # fmt: skip
    dummy = _dummy(device)

    alloc = shape if out_shape is None else out_shape

    def run(
        y: torch.Tensor, mask: torch.Tensor | None, scale: torch.Tensor | None = None
    ) -> torch.Tensor:
        out = torch.empty(alloc, dtype=dtype, device=device)
        m = dummy if mask is None else mask
        launch(y, m, dummy if scale is None else scale, out, table)
        return out

    return run


def _phi_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _row_pinv(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run | None:
    """``conj(mask) * window_c(y / Phi)``: 1 / Phi by a small kernel, then the adjoint.

    Without a mask, 1 / Phi depends on the signature alone and is computed once. With
    one it has the mask's outer shape (size 1 where the mask broadcasts), so a 2-D mask
    costs a kernel over one image, not over the batch.
    """
    shape = x_shape(list(y.shape), (list(offsets), axis, cax))
    dtype = result_dtype(y, mask)
    if dtype not in _ROW_DTYPES or dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        return None
    ms = None if mask is None else _mask_strides(mask, tuple(mask.stride()))
    g = geometry(tuple(shape), contiguous_strides(shape), tuple(y.stride()), ms, axis, cax,
                 y.shape[axis])  # fmt: skip
    if g is None:
        return None
    r = row_view(g, mask is not None)
    if r is None:
        return None
    device = y.device
    phi_dtype = _phi_dtype(dtype)
    outer, q_strides = inverse_phi_rows(r, mask is not None)
    block = row_block(r.out_width)
    phi_grid = (outer[0] * outer[1] * outer[2], triton.cdiv(r.out_width, block), 1)
    if phi_grid[1] > _MAX_GRID_Y:
        return None
    table, step, base, has_table = _table(offsets, device, r.inner)
    mask_rows = tuple(st if n > 1 else 0 for n, st in zip(outer, r.mask, strict=True))
    phi_launch = Launcher(
        _inverse_phi_rows,
        phi_grid,
        (outer[1], outer[2], *mask_rows, r.mask_c, r.mask_j, *q_strides,
         r.width, r.out_width, step, base),
        dict(CHANNELS=len(offsets), HAS_MASK=mask is not None, HAS_TABLE=has_table,
             ACC=_acc(phi_dtype), LARGE=r.large, BLOCK=block, num_warps=row_warps(block)),
        device.index,
    )  # fmt: skip
    adjoint = _row_adjoint(y, offsets, axis, cax, mask, scale=q_strides, out_shape=out_shape)
    if adjoint is None:
        return None
    q_shape = (*outer, r.out_width)
    dummy = _dummy(device)
    if mask is None:
        inverse_count = torch.empty(q_shape, dtype=phi_dtype, device=device)
        phi_launch(dummy, inverse_count, table)

        def run_unmasked(y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            return adjoint(y, None, inverse_count)

        return run_unmasked

    def run(y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        assert mask is not None
        inverse_phi = torch.empty(q_shape, dtype=phi_dtype, device=device)
        phi_launch(mask, inverse_phi, table)
        return adjoint(y, mask, inverse_phi)

    return run


# The general kernels: any strides, complex dtypes; index arithmetic per element.


def _general_forward(
    x: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    shape = y_shape(list(x.shape), (list(offsets), axis, cax))
    dtype = result_dtype(x, mask)
    device = x.device
    numel = math.prod(shape)
    alloc = shape if out_shape is None else out_shape
    if numel == 0 or x.numel() == 0:
        return lambda x, mask: torch.zeros(alloc, dtype=dtype, device=device)
    _, xs, x_complex = _reals(x)
    ms, m_complex = None, False
    if mask is not None:
        _, mstr, m_complex = _reals(mask)
        ms = _mask_strides(mask, mstr)
    g = _geometry(list(x.shape), xs, contiguous_strides(shape), ms, axis, cax, shape[axis])
    table, step, base, has_table = _table(offsets, device)
    launch = Launcher(
        _forward_kernel,
        _grid(numel),
        (*g.size, *g.big, g.big_c, *g.mask, g.mask_c, g.channels, g.out_width, step, base,
         numel),
        dict(HAS_MASK=mask is not None, HAS_TABLE=has_table, X_COMPLEX=x_complex,
             M_COMPLEX=m_complex, ACC=_acc(dtype), LARGE=g.large, BLOCK=CUDA["general_block"]),
        device.index,
    )  # fmt: skip
    dummy = _dummy(device)

    def run(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        y = torch.empty(alloc, dtype=dtype, device=device)
        yr = torch.view_as_real(y) if y.is_complex() else y
        mr = dummy if mask is None else _reals(mask)[0]
        launch(_reals(x)[0], mr, yr, table)
        return y

    return run


def _general_adjoint_launch(
    out_shape: list[int],
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_dtype: torch.dtype,
    by_count: bool,
) -> Launcher:
    _, ys, y_complex = _reals(y)
    ms, m_complex = None, False
    if mask is not None:
        _, mstr, m_complex = _reals(mask)
        ms = _mask_strides(mask, mstr)
    step_out = 2 if out_dtype.is_complex else 1
    out_strides = tuple(s * step_out for s in contiguous_strides(out_shape))
    g = _geometry(out_shape, out_strides, ys, ms, axis, cax, y.shape[axis])
    _, step, base, has_table = _table(offsets, y.device)
    channel_fast = contiguous_strides(out_shape)[cax] == 1
    numel = math.prod(out_shape)
    return Launcher(
        _adjoint_kernel,
        _grid(numel),
        (*g.size, *g.big, g.big_c, *g.mask, g.mask_c, *g.small, g.channels, step, base, numel),
        dict(HAS_MASK=mask is not None, HAS_TABLE=has_table, Y_COMPLEX=y_complex,
             M_COMPLEX=m_complex, CHANNEL_FAST=channel_fast, BY_COUNT=by_count,
             ACC=_acc(out_dtype), LARGE=g.large, BLOCK=CUDA["general_block"]),
        y.device.index,
    )  # fmt: skip


def _general_adjoint(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    by_count: bool = False,
    out_shape: list[int] | None = None,
) -> Run:
    shape = x_shape(list(y.shape), (list(offsets), axis, cax))
    dtype = result_dtype(y, mask)
    device = y.device
    if math.prod(shape) == 0:
        return lambda y, mask: torch.empty(shape, dtype=dtype, device=device)
    launch = _general_adjoint_launch(shape, y, offsets, axis, cax, mask, dtype, by_count)
    table = _table(offsets, device)[0]
    dummy = _dummy(device)

    def run(y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=device)
        mr = dummy if mask is None else _reals(mask)[0]
        launch(_reals(y)[0], mr, _reals(out)[0], table)
        return out if out_shape is None else out.view(out_shape)

    return run


def _general_pinv(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    if mask is None:
        return _general_adjoint(y, offsets, axis, cax, None, by_count=True, out_shape=out_shape)
    shape = x_shape(list(y.shape), (list(offsets), axis, cax))
    out_dtype = result_dtype(y, mask)
    device = y.device
    if math.prod(shape) == 0:
        return lambda y, mask: torch.empty(shape, dtype=out_dtype, device=device)
    # z = y / Phi is complex only when y is; its precision is that of the result (at
    # least float32).
    double = out_dtype in (torch.float64, torch.complex128)
    if y.is_complex():
        z_dtype = torch.complex128 if double else torch.complex64
    else:
        z_dtype = torch.float64 if double else torch.float32
    _, ys, y_complex = _reals(y)
    _, mstr, m_complex = _reals(mask)
    ms = _mask_strides(mask, mstr)
    g = _geometry(shape, contiguous_strides(shape), ys, ms, axis, cax, y.shape[axis])
    table, step, base, has_table = _table(offsets, device)
    z_numel = y.numel()
    divide = Launcher(
        _pinv_divide_kernel,
        _grid(z_numel),
        (*g.size, *g.mask, g.mask_c, *g.small, g.channels, g.out_width, step, base, z_numel),
        dict(HAS_TABLE=has_table, Y_COMPLEX=y_complex, M_COMPLEX=m_complex,
             ACC=_acc(z_dtype), LARGE=g.large, BLOCK=CUDA["general_block"]),
        device.index,
    )  # fmt: skip
    z_like = torch.empty(y.shape, dtype=z_dtype, device="meta")
    adjoint = _general_adjoint_launch(shape, z_like, offsets, axis, cax, mask, out_dtype, False)

    def run(y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        assert mask is not None
        z = torch.empty(y.shape, dtype=z_dtype, device=device)
        mr = _reals(mask)[0]
        divide(_reals(y)[0], mr, _reals(z)[0], table)
        out = torch.empty(shape, dtype=out_dtype, device=device)
        adjoint(_reals(z)[0], mr, _reals(out)[0], table)
        return out if out_shape is None else out.view(out_shape)

    return run


def _checked(
    row: Callable[..., Run | None],
    general: Callable[..., Run],
    a: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    """The row kernel's plan where it covers the layout, else the general kernel's.

    Results are allocated with `out_shape` (default: the channel axis kept with size
    1), which must have the same elements in the same order.
    """
    empty = a.numel() == 0 or (mask is not None and mask.numel() == 0)
    if not empty:
        plan = row(a, offsets, axis, cax, mask, out_shape=out_shape)
        if plan is not None:
            return plan
    return general(a, offsets, axis, cax, mask, out_shape=out_shape)


def plan_forward(
    x: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    """The forward for tensors laid out like `x` and `mask` (result: channel axis of 1).

    Raises NotImplementedError for a layout the general kernel does not cover either.
    """
    return _checked(_row_forward, _general_forward, x, offsets, axis, cax, mask, out_shape)


def plan_adjoint(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    """The adjoint for tensors laid out like `y` (channel axis of 1) and `mask`."""
    return _checked(_row_adjoint, _general_adjoint, y, offsets, axis, cax, mask, out_shape)


def plan_pinv(
    y: torch.Tensor,
    offsets: tuple[int, ...],
    axis: int,
    cax: int,
    mask: torch.Tensor | None,
    out_shape: list[int] | None = None,
) -> Run:
    """The pseudo-inverse for tensors laid out like `y` (channel axis of 1) and `mask`."""
    return _checked(_row_pinv, _general_pinv, y, offsets, axis, cax, mask, out_shape)


# One-off calls (the tests run both kernel families through these).


def _one_off(row: Callable[..., Run], general: Callable[..., Run]) -> Callable[..., torch.Tensor]:
    def call(
        a: torch.Tensor,
        offsets: list[int],
        axis: int,
        cax: int,
        mask: torch.Tensor | None,
        *,
        general_kernel: bool = False,
    ) -> torch.Tensor:
        plan = general if general_kernel else row
        return plan(a, tuple(offsets), axis, cax, mask)(a, mask)

    return call


forward = _one_off(plan_forward, _general_forward)
forward.__doc__ = "``y`` (channel axis kept with size 1) by the row kernel, or the general one."
adjoint = _one_off(plan_adjoint, _general_adjoint)
adjoint.__doc__ = "``conj(mask) * window_c(y)`` by the row kernel, or the general one."
pinv = _one_off(plan_pinv, _general_pinv)
pinv.__doc__ = "``A^H (y / Phi)`` by the row kernels, or the general ones."
