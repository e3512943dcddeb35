"""Dask operands: in-memory arrays wrapped beside Dask ones, and blockwise calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import array_api_compat as compat
import dask.array as da
from dask.array.utils import meta_from_array

from ... import _dispatch

SUMMARY = "blockwise over the other axes; each block runs its library's fast path"


def wrap(arrays: Sequence[Any], labels: Sequence[Sequence[Any]] | None = None) -> tuple[Any, ...]:
    """Wrap each non-Dask array lazily, chunked like a Dask operand's matching axis."""
    if labels is None:  # axes by position from the end
        labels = [() if a is None else tuple(range(-a.ndim, 0)) for a in arrays]
    chunks_by_axis: dict[tuple[Any, int], tuple[int, ...]] = {}
    for a, names in zip(arrays, labels, strict=True):
        if compat.is_dask_array(a):
            for label, n, c in zip(names, a.shape, a.chunks, strict=True):
                chunks_by_axis.setdefault((label, n), c)
    out = []
    for a, names in zip(arrays, labels, strict=True):
        if a is None or compat.is_dask_array(a):
            out.append(a)
            continue
        chunks = tuple(
            chunks_by_axis.get((label, n), "auto") for label, n in zip(names, a.shape, strict=True)
        )
        out.append(da.from_array(a, chunks=chunks))  # type: ignore[no-untyped-call]
    return tuple(out)


def _block(arr: Any, mask: Any = None, *, fn: Callable[..., Any], **kw: Any) -> Any:
    """One block through the public function `fn`, by its library's own choice."""
    with _dispatch.without_preferences():
        return fn(arr, mask=mask, **kw)


def blockwise(
    fn: Callable[..., Any], a: Any, whole: tuple[int, ...], adjust: dict[int, int], **kw: Any
) -> Any:
    """``fn(block, mask=mask_block, **kw)`` of each block of ``a.array``, lazily; axes in
    `whole` single chunks, meta given since `fn` cannot run on empty blocks."""
    array = a.array.rechunk({ax: -1 for ax in whole})
    idx = "abcdefghijklmnopqrstuvwxyz"[: array.ndim]
    args: list[Any] = [array, idx]
    if a.mask is not None:
        chunks = tuple(
            (m,) if m == 1 or d in (a.channel_axis, a.axis) else array.chunks[d]
            for d, m in enumerate(a.mask.shape)
        )
        args += [a.mask.rechunk(chunks), idx]
    meta = meta_from_array(array._meta, ndim=array.ndim, dtype=a.dtype)  # type: ignore[no-untyped-call]
    return da.blockwise(  # type: ignore[no-untyped-call]
        _block,
        idx,
        *args,
        adjust_chunks={idx[d]: (n,) for d, n in adjust.items()},
        concatenate=True,
        dtype=a.dtype,
        meta=meta,
        align_arrays=False,
        fn=fn,
        **kw,
    )
