"""Dask shear / unshear: blockwise, each block run by its own library's fast path.

Only the channel axis (each channel has its own offset) and the shifted axis (the
channels move along it) become single chunks; every other axis keeps its chunks, so
the work stays parallel over batch and rows. The result stays lazy.
"""

from __future__ import annotations

from typing import Any

import dask.array as da

from ... import _dispatch, extend
from ..._ops.shear import ShearArgs, growth, shear, unshear
from ...extend import Priority


def _offsets(a: ShearArgs) -> list[float] | list[int]:
    """The normalised offsets as one list that each block's call normalises to itself."""
    if a.fractions is None:
        return list(a.offsets)
    return [n + f for n, f in zip(a.offsets, a.fractions, strict=True)]


def _blockwise(a: ShearArgs, block_fn: Any, width_change: int) -> Any:
    array = a.array.rechunk({a.channel_axis: -1, a.axis: -1})
    mask = a.mask
    if mask is not None:
        chunks = tuple(
            (m,) if m == 1 or d in (a.channel_axis, a.axis) else array.chunks[d]
            for d, m in enumerate(mask.shape)
        )
        mask = mask.rechunk(chunks)
    idx = "abcdefghijklmnopqrstuvwxyz"[: array.ndim]
    args: list[Any] = [array, idx]
    if mask is not None:
        args += [mask, idx]
    dtype = array.dtype if mask is None else da.result_type(array, mask)
    return da.blockwise(
        block_fn,
        idx,
        *args,
        adjust_chunks={idx[a.axis]: (array.shape[a.axis] + width_change,)},
        concatenate=True,
        dtype=dtype,
        offsets=_offsets(a),
        axis=a.axis,
        channel_axis=a.channel_axis,
        align_arrays=False,
    )


def _shear_block(x: Any, mask: Any = None, **kw: Any) -> Any:
    with _dispatch.without_preferences():
        return shear(x, kw.pop("offsets"), mask=mask, **kw)


def _unshear_block(y: Any, mask: Any = None, **kw: Any) -> Any:
    with _dispatch.without_preferences():
        return unshear(y, kw.pop("offsets"), mask=mask, **kw)


def shear_blockwise(a: ShearArgs) -> Any:
    """``shear`` of each block (channels and the shifted axis whole), lazily."""
    return _blockwise(a, _shear_block, growth(a.offsets, a.fractions))


def unshear_blockwise(a: ShearArgs) -> Any:
    """``unshear`` of each block (channels and the shifted axis whole), lazily."""
    return _blockwise(a, _unshear_block, -growth(a.offsets, a.fractions))


_SUMMARY = "blockwise over the other axes; each block runs its library's fast path"
extend.register(
    "shear", "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=_SUMMARY
)(shear_blockwise)
extend.register(
    "unshear", "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=_SUMMARY
)(unshear_blockwise)
