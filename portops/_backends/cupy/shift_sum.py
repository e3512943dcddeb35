"""CuPy shift_sum family: the CUDA gather kernels of ``portops/_kernels/shift_sum.cu``
(no atomics, one launch per operator, strided inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache, lru_cache, partial
from typing import Any

import cupy
import numpy as np

from ... import extend
from ..._generic import shift_sum as generic
from ..._kernels.geometry import (
    Geometry,
    RowView,
    contiguous_strides,
    geometry,
    inverse_phi_rows,
    linear_step,
    row_block,
    row_view,
)
from ..._kernels.loader import kernel_name, kernel_source, real_of
from ..._ops.shift_sum import ShiftSumArgs
from ..._tables import CUDA
from ...extend import Priority

_OPTIONS = ("--std=c++17",)
_NULL = np.uintp(0)

_SCALARS = ("big_c", "mask_c", "channels", "out_width", "step", "base", "total", "channel_fast")
_ROW_SCALARS = ("big_c", "mask_c", "mask_j", "width", "out_width", "step", "base", "channels")


@cache
def _struct(large: bool, rows: bool = False) -> np.dtype:
    """NumPy twin of ``Geometry<I>`` or ``Rows<I>`` in shift_sum.cu (all fields I: no padding)."""
    it = np.int64 if large else np.int32
    if rows:
        fields: list[tuple[Any, ...]] = [("s1", it), ("s2", it)]
        fields += [(f, it, (3,)) for f in ("big", "mask", "small", "scale")]
    else:
        fields = [(f, it, (6,)) for f in ("size", "big", "mask", "small")]
    return np.dtype(fields + [(f, it) for f in (_ROW_SCALARS if rows else _SCALARS)], align=True)


def _record(g: Geometry, offsets: tuple[int, ...], total: int, channel_fast: bool) -> np.void:
    step, base = linear_step(offsets) or (0, 0)
    values = (g.size, g.big, g.mask, g.small, g.big_c, g.mask_c, g.channels, g.out_width,
              step, base, total, int(channel_fast))  # fmt: skip
    return np.array(values, dtype=_struct(g.large))[()]  # type: ignore[return-value]


@cache
def _function(name: str, device_id: int, source: str = "shift_sum.cu") -> Any:
    """The kernel instance `name` of `source` compiled for device `device_id` (cached)."""
    with cupy.cuda.Device(device_id):
        code = kernel_source(source)
        module = cupy.RawModule(code=code, options=_OPTIONS, name_expressions=(name,))
        return module.get_function(name)


@cache
def _grid_limit(device_id: int) -> int:
    sms = cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]
    return int(sms) * int(CUDA["blocks_per_sm"])


def _launch(
    kernel: str, dtypes: tuple[str, ...], g: Geometry, total: int, args: tuple[Any, ...]
) -> None:
    device_id = cupy.cuda.Device().id
    fn = _function(kernel_name(kernel, dtypes, g.large), device_id)
    block = CUDA["threads_per_block"]
    grid = max(1, min(math.ceil(total / block), _grid_limit(device_id)))
    fn((grid,), (block,), args)


def _strides(a: Any) -> tuple[int, ...] | None:
    """Element strides of `a`, or None when they are not whole elements."""
    if any(s % a.itemsize for s in a.strides):
        return None
    return tuple(s // a.itemsize for s in a.strides)


def _known_strides(a: Any) -> tuple[int, ...]:
    strides = _strides(a)  # whole elements: see _plain and _whole
    assert strides is not None
    return strides


def _whole(a: Any, mask: Any) -> bool:
    """True when the strides of `a` and `mask` (None or an array) are whole elements."""
    return _strides(a) is not None and (mask is None or _strides(mask) is not None)


def _geometry(
    a: ShiftSumArgs,
    big_shape: Any,
    big: tuple[int, ...],
    small: tuple[int, ...],
    mask: Any,
    out_width: int,
) -> Geometry | None:
    """:func:`geometry` of `a`'s axes for these strides (`mask`: None or an array, its
    strides 0 along its size-1 dims)."""
    ms = None
    if mask is not None:
        dims = zip(mask.shape, _known_strides(mask), strict=True)
        ms = tuple(0 if n == 1 else s for n, s in dims)
    return geometry(tuple(big_shape), big, small, ms, a.axis, a.channel_axis, out_width)


def _name(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


def _acc(dtype: Any) -> np.dtype:
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


@lru_cache(maxsize=64)
def _table_arg(offsets: tuple[int, ...], device_id: int, inner: int = 1) -> Any:
    """Irregular offsets (times `inner`) as a cached device array; NULL for even ones."""
    if linear_step(offsets) is not None:
        return _NULL
    with cupy.cuda.Device(device_id):
        table = cupy.asarray(np.asarray([o * inner for o in offsets], dtype=np.int64))
        # Cached arrays are used later from any stream: finish the copy now.
        cupy.cuda.get_current_stream().synchronize()
        return table


def _plain(a: Any) -> Any:
    """`a` itself when its strides are whole elements, else a contiguous copy."""
    return a if _strides(a) is not None else cupy.ascontiguousarray(a)


def forward_general(a: ShiftSumArgs) -> Any:
    """CUDA gather kernel: one thread per output element, mask fused, one launch."""
    x, offsets, ax, cax, mask = _plain(a.array), a.offsets, a.axis, a.channel_axis, a.mask
    mask = None if mask is None else _plain(mask)
    out_dtype = np.dtype(a.dtype)
    y_shape = list(x.shape)
    y_shape[ax] += max(offsets)
    y_shape[cax] = 1
    with cupy.cuda.Device(x.device.id):
        y = cupy.empty(y_shape, dtype=out_dtype)
        if y.size and x.size == 0:
            y.fill(0)
        elif y.size:
            g = _geometry(a, x.shape, _known_strides(x), contiguous_strides(y_shape), mask,
                          y_shape[ax])  # fmt: skip
            if g is None:  # more dims than the kernels iterate over: reference path
                return generic.forward(a)
            dtypes = (_name(x.dtype), _name(x.dtype if mask is None else mask.dtype),
                      _name(_acc(out_dtype)), _name(out_dtype))  # fmt: skip
            rec = _record(g, offsets, y.size, False)
            m = _NULL if mask is None else mask
            table = _table_arg(offsets, cupy.cuda.Device().id)
            _launch("shift_sum_forward", dtypes, g, y.size, (x, m, y, table, rec))
    return y if a.keepdims else cupy.squeeze(y, axis=cax)


def _adjoint_into(
    out: Any, y: Any, mask: Any, a: ShiftSumArgs, acc: np.dtype, by_count: bool
) -> bool:
    """Launch the adjoint kernel writing `out`; False when the layout does not fit."""
    g = _geometry(a, out.shape, _known_strides(out), _known_strides(y), mask, y.shape[a.axis])
    if g is None:
        return False
    channel_fast = contiguous_strides(out.shape)[a.channel_axis] == 1 and out.ndim > 1
    dtypes = (_name(y.dtype), _name(y.dtype if mask is None else mask.dtype), _name(acc),
              _name(out.dtype))  # fmt: skip
    rec = _record(g, a.offsets, out.size, channel_fast)
    table = _table_arg(a.offsets, cupy.cuda.Device().id)
    args = (y, _NULL if mask is None else mask, out, table, rec, np.int32(by_count))
    _launch("shift_sum_adjoint", dtypes, g, out.size, args)
    return True


def adjoint_general(a: ShiftSumArgs) -> Any:
    """CUDA gather kernel: one thread per element of the result, mask fused, one launch."""
    y = _plain(a.array)
    mask = None if a.mask is None else _plain(a.mask)
    out_dtype = np.dtype(a.dtype)
    with cupy.cuda.Device(y.device.id):
        out = cupy.empty(a.shape, dtype=out_dtype)
        if out.size and not _adjoint_into(out, y, mask, a, _acc(out_dtype), False):
            return generic.adjoint(a)
    return out


def pinv_general(a: ShiftSumArgs) -> Any:
    """``A^H (y / Phi)``: two launches (one without a mask), Phi never stored."""
    y = _plain(a.array)
    mask = None if a.mask is None else _plain(a.mask)
    out_dtype = np.dtype(a.dtype)
    acc = np.dtype(a.acc_dtype)
    with cupy.cuda.Device(y.device.id):
        out = cupy.empty(a.shape, dtype=out_dtype)
        if out.size == 0:
            return out
        if mask is None:
            # Phi counts the channels reaching each position: the adjoint's loop does it.
            return out if _adjoint_into(out, y, None, a, acc, True) else generic.pinv(a)
        z = cupy.empty(y.shape, dtype=acc)
        g = _geometry(a, out.shape, contiguous_strides(out.shape), _known_strides(y), mask,
                      y.shape[a.axis])  # fmt: skip
        if g is None:
            return generic.pinv(a)
        dtypes = (_name(y.dtype), _name(mask.dtype), real_of(_name(acc)), _name(acc))
        rec = _record(g, a.offsets, z.size, False)
        args = (y, mask, z, _table_arg(a.offsets, cupy.cuda.Device().id), rec)
        _launch("shift_sum_pinv_divide", dtypes, g, z.size, args)
        if not _adjoint_into(out, z, mask, a, acc, False):
            return generic.pinv(a)
    return out


# A plan keeps a signature's compiled function, grid and arguments: a repeat only launches.

_MAX_GRID_Y = 65535

Run = Callable[[Any, Any], Any]


def _rows_record(r: RowView, offsets: tuple[int, ...], scale: tuple[int, ...]) -> np.void:
    step, base = linear_step(offsets) or (0, 0)
    values = (r.s1, r.s2, r.big, r.mask, r.small, scale, r.big_c, r.mask_c, r.mask_j, r.width,
              r.out_width, step * r.inner, base * r.inner, len(offsets))  # fmt: skip
    return np.array(values, dtype=_struct(r.large, rows=True))[()]  # type: ignore[return-value]


def _tight_block(columns: int) -> int:
    """The largest row block idling at most an eighth of its threads, else the narrowest."""
    block = row_block(1 << 30)
    while block > row_block(0):
        if -(-columns // block) * block - columns <= columns // 8:
            return block
        block //= 2
    return block


def _launcher(
    kernel: str, dtypes: tuple[str, ...], large: bool, device_id: int, *constants: int
) -> Any:
    """The compiled instance of `kernel` (`constants`: see :func:`kernel_name`)."""
    return _function(kernel_name(kernel, dtypes, large, constants), device_id)


def _on_device(device_id: int, run: Run) -> Run:
    """`run` on `device_id` (its arrays' device), entering it only when it is not current."""

    def run_there(a: Any, mask: Any) -> Any:
        if cupy.cuda.runtime.getDevice() == device_id:
            return run(a, mask)
        with cupy.cuda.Device(device_id):
            return run(a, mask)

    return run_there


def _row_forward(a: ShiftSumArgs, out_shape: list[int]) -> Run | None:
    x, mask, offsets = a.array, a.mask, a.offsets
    if not _whole(x, mask):
        return None
    out_dtype = np.dtype(a.dtype)
    shape = list(x.shape)
    shape[a.axis] += max(offsets)
    shape[a.channel_axis] = 1
    if math.prod(shape) == 0 or x.size == 0:
        return None
    g = _geometry(a, x.shape, _known_strides(x), contiguous_strides(shape), mask, shape[a.axis])
    r = None if g is None else row_view(g, mask is not None)
    if r is None or math.ceil(r.out_width / 128) > _MAX_GRID_Y:
        return None
    device_id = x.device.id
    dtypes = (_name(x.dtype), _name(x.dtype if mask is None else mask.dtype),
              _name(_acc(out_dtype)), _name(out_dtype))  # fmt: skip
    # Fastest on an H100: channel count read at run time, blocks wasting few threads.
    fn = _launcher("shift_sum_forward_rows", dtypes, r.large, device_id, 0)
    table = _table_arg(offsets, device_id, r.inner)
    rec = _rows_record(r, offsets, (0, 0, 0))
    threads = _tight_block(r.out_width)
    grid, block = (r.rows, math.ceil(r.out_width / threads)), (threads,)

    def run(x: Any, mask: Any) -> Any:
        y = cupy.empty(out_shape, dtype=out_dtype)
        fn(grid, block, (x, _NULL if mask is None else mask, y, table, rec))
        return y

    return run


def _row_adjoint(
    a: ShiftSumArgs, out_shape: list[int], scaled: bool = False
) -> Callable[..., Any] | None:
    y, mask, offsets = a.array, a.mask, a.offsets
    if not _whole(y, mask):
        return None
    out_dtype = np.dtype(a.dtype)
    shape = list(a.shape)
    if math.prod(shape) == 0:
        return None
    g = _geometry(a, shape, contiguous_strides(shape), _known_strides(y), mask, y.shape[a.axis])
    r = None if g is None else row_view(g, mask is not None)
    if r is None or math.ceil(r.width / 128) > _MAX_GRID_Y:
        return None
    device_id = y.device.id
    acc = _acc(out_dtype)
    real = real_of(_name(acc))
    dtypes = (_name(y.dtype), _name(y.dtype if mask is None else mask.dtype), real,
              _name(acc), _name(out_dtype))  # fmt: skip
    fn = _launcher("shift_sum_adjoint_rows", dtypes, r.large, device_id, len(offsets))
    table = _table_arg(offsets, device_id, r.inner)
    phi_rows, q_strides = inverse_phi_rows(r, mask is not None)
    rec = _rows_record(r, offsets, q_strides if scaled else (0, 0, 0))
    threads = row_block(r.width)
    grid, block = (r.rows, math.ceil(r.width / threads)), (threads,)

    def run(y: Any, mask: Any, scale: Any = _NULL) -> Any:
        out = cupy.empty(out_shape, dtype=out_dtype)
        fn(grid, block, (y, _NULL if mask is None else mask, scale, out, table, rec))
        return out

    if not scaled:
        return run
    # The pseudo-inverse: 1 / Phi over the mask's outer extent, then the scaled adjoint.
    phi_dtype = np.dtype(real)
    q_shape = (phi_rows.rows, r.out_width)
    m_dtype = _name(y.dtype if mask is None else mask.dtype)
    phi_fn = _launcher("shift_sum_inverse_phi_rows", (m_dtype, real), r.large, device_id)
    phi_rec = _rows_record(phi_rows, offsets, q_strides)
    phi_threads = row_block(r.out_width)
    phi_grid = (phi_rows.rows, math.ceil(r.out_width / phi_threads))
    if mask is None:
        inverse_count = cupy.empty(q_shape, dtype=phi_dtype)
        phi_fn(phi_grid, (phi_threads,), (_NULL, inverse_count, table, phi_rec))
        return lambda y, mask: run(y, None, inverse_count)

    def pinv(y: Any, mask: Any) -> Any:
        inverse_phi = cupy.empty(q_shape, dtype=phi_dtype)
        phi_fn(phi_grid, (phi_threads,), (mask, inverse_phi, table, phi_rec))
        return run(y, mask, inverse_phi)

    return pinv


def _plan(kind: str, a: ShiftSumArgs, raw: bool) -> Run:
    """The plan of a call (`raw`: taking the public call's arrays, else normalised ones)."""
    shape = list(a.shape)
    row = _row_forward(a, shape) if kind == "forward" else _row_adjoint(a, shape, kind == "pinv")
    if row is not None:
        core = row
        if a.mask is not None:
            dtype = a.mask.dtype

            def core(arr: Any, mask: Any) -> Any:
                if mask is not None and mask.dtype != dtype:
                    mask = mask.astype(dtype)
                return row(arr, mask)

        return _on_device(a.array.device.id, core)
    # The general kernels on the normalised arrays, the channel axis of the result kept.
    impl = {"forward": forward_general, "adjoint": adjoint_general, "pinv": pinv_general}[kind]
    template = a._replace(array=None, mask=None, keepdims=True)  # keeps no array alive
    run = _on_device(a.array.device.id, lambda x, m: impl(template._replace(array=x, mask=m)))
    # Raw (array, mask) of a call -> the normalised pair `a` was made from.
    m_shape = None if a.mask is None else tuple(a.mask.shape)
    m_dtype = None if a.mask is None else a.mask.dtype
    expand = raw and kind != "forward" and not a.keepdims
    squeeze = kind == "forward" and not a.keepdims
    cax = a.channel_axis

    def normalised(arr: Any, mask: Any) -> Any:
        if expand:
            arr = cupy.expand_dims(arr, cax)
        if mask is not None:
            mask = mask if mask.dtype == m_dtype else mask.astype(m_dtype)
            mask = mask if mask.shape == m_shape else mask.reshape(m_shape)
        out = run(arr, mask)
        return cupy.squeeze(out, axis=cax) if squeeze else out

    return normalised


def _call(kind: str, a: ShiftSumArgs) -> Any:
    return _plan(kind, a, raw=False)(a.array, a.mask)


for kind, summary in (
    ("forward", "CUDA gather kernel (RawModule): one launch, no atomics, mask fused; planned"),
    ("adjoint", "CUDA row kernel (RawModule): one launch, mask fused; planned"),
    ("pinv", "CUDA kernels: 1 / Phi over the mask's extent, then the scaled adjoint; planned"),
):
    op = "shift_sum" if kind == "forward" else f"shift_sum_{kind}"
    planner = partial(_plan, kind, raw=True)
    extend.register(op, "cupy_gather", libraries=["cupy"], priority=Priority.SPECIALIZED,
                    planner=planner, summary=summary)(partial(_call, kind))  # fmt: skip
