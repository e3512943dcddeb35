"""Dask shift_sum family: blockwise, each block run by its own library's fast path.

Only the axes that need it are rechunked: the channel axis (summed over) and the
shifted axis (channels spread along it) each become one chunk; every other axis keeps
its chunks, so the work stays parallel over batch and rows. The result stays lazy.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
from dask.array.utils import meta_from_array

from ... import _dispatch, extend
from ..._ops.shift_sum import ShiftSumArgs, shift_sum, shift_sum_adjoint, shift_sum_pinv
from ...extend import Priority


def _aligned(a: ShiftSumArgs, array: Any, whole: tuple[int, ...]) -> tuple[Any, Any]:
    """Rechunk `array` so the axes in `whole` are single chunks; align the mask to it.

    The mask has x's layout: its channel and shifted axes are single chunks, its
    size-1 (broadcast) axes one chunk of 1, and every other axis follows `array`.
    """
    array = array.rechunk({ax: -1 for ax in whole})
    mask = a.mask
    if mask is not None:
        chunks = tuple(
            (m,) if m == 1 or d in (a.channel_axis, a.axis) else array.chunks[d]
            for d, m in enumerate(mask.shape)
        )
        mask = mask.rechunk(chunks)
    return array, mask


def _meta(array: Any, ndim: int, dtype: Any) -> Any:
    """An empty block of `array`'s chunk library (CuPy chunks give CuPy results).

    Given, not inferred: Dask would call the block function on empty blocks, which have
    no channels to shift, and fall back to NumPy.
    """
    return meta_from_array(array._meta, ndim=ndim, dtype=dtype)


def _indices(ndim: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[:ndim]


def forward(a: ShiftSumArgs) -> Any:
    """``shift_sum`` of each block (channels and the shifted axis whole), lazily."""
    x, mask = _aligned(a, a.array, (a.channel_axis, a.axis))
    grow = max(a.offsets)
    idx = _indices(x.ndim)
    out_idx = idx.replace(idx[a.channel_axis], "") if not a.keepdims else idx
    out_chunks = {idx[a.axis]: (x.shape[a.axis] + grow,)}
    if a.keepdims:
        out_chunks[idx[a.channel_axis]] = (1,)
    args: list[Any] = [x, idx]
    if mask is not None:
        args += [mask, idx]
    dtype = x.dtype if mask is None else da.result_type(x, mask)
    return da.blockwise(
        _forward_block,
        out_idx,
        *args,
        adjust_chunks=out_chunks,
        concatenate=True,
        dtype=dtype,
        meta=_meta(x, len(out_idx), dtype),
        offsets=a.offsets,
        axis=a.axis,
        channel_axis=a.channel_axis,
        keepdims=a.keepdims,
        align_arrays=False,
    )


def _forward_block(x: Any, mask: Any = None, **kw: Any) -> Any:
    with _dispatch.without_preferences():
        return shift_sum(x, list(kw.pop("offsets")), mask=mask, **kw)


def _transposed(a: ShiftSumArgs, block_fn: Any, dtype: Any) -> Any:
    y, mask = _aligned(a, a.array, (a.axis,))
    idx = _indices(y.ndim)
    width = y.shape[a.axis] - max(a.offsets)
    out_chunks = {idx[a.axis]: (width,), idx[a.channel_axis]: (len(a.offsets),)}
    args: list[Any] = [y, idx]
    if mask is not None:
        args += [mask, idx]
    return da.blockwise(
        block_fn,
        idx,
        *args,
        adjust_chunks=out_chunks,
        concatenate=True,
        dtype=dtype,
        meta=_meta(y, y.ndim, dtype),
        offsets=a.offsets,
        axis=a.axis,
        channel_axis=a.channel_axis,
        align_arrays=False,
    )


def _adjoint_block(y: Any, mask: Any = None, **kw: Any) -> Any:
    with _dispatch.without_preferences():
        return shift_sum_adjoint(y, list(kw.pop("offsets")), mask=mask, keepdims=True, **kw)


def _pinv_block(y: Any, mask: Any = None, **kw: Any) -> Any:
    with _dispatch.without_preferences():
        return shift_sum_pinv(y, list(kw.pop("offsets")), mask=mask, keepdims=True, **kw)


def adjoint(a: ShiftSumArgs) -> Any:
    """``shift_sum_adjoint`` of each block (the shifted axis whole), lazily."""
    dtype = a.array.dtype if a.mask is None else da.result_type(a.array, a.mask)
    return _transposed(a, _adjoint_block, dtype)


def pinv(a: ShiftSumArgs) -> Any:
    """``shift_sum_pinv`` of each block: ``Phi`` only mixes along the shifted axis."""
    dtype = a.array.dtype if a.mask is None else da.result_type(a.array, a.mask)
    return _transposed(a, _pinv_block, dtype)


_SUMMARY = "blockwise over the other axes; each block runs its library's fast path"
extend.register(
    "shift_sum",
    "dask_blockwise",
    libraries=["dask"],
    priority=Priority.SPECIALIZED,
    summary=_SUMMARY,
)(forward)
extend.register(
    "shift_sum_adjoint",
    "dask_blockwise",
    libraries=["dask"],
    priority=Priority.SPECIALIZED,
    summary=_SUMMARY,
)(adjoint)
extend.register(
    "shift_sum_pinv",
    "dask_blockwise",
    libraries=["dask"],
    priority=Priority.SPECIALIZED,
    summary=_SUMMARY,
)(pinv)
