"""In-memory operands beside Dask arrays, wrapped as Dask arrays whose chunks match."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat as compat
import dask.array as da


def _right_aligned(arrays: Sequence[Any]) -> list[tuple[int, ...]]:
    return [() if a is None else tuple(range(-a.ndim, 0)) for a in arrays]


def wrap(arrays: Sequence[Any], labels: Sequence[Sequence[Any]] | None = None) -> tuple[Any, ...]:
    """Wrap each array that is not a Dask array with ``da.from_array``; nothing computes.

    An axis of a wrapped array takes the chunks of the first Dask operand's axis with the
    same label and length, else Dask's automatic chunks (what ``da.asarray`` gives).
    """
    if labels is None:
        labels = _right_aligned(arrays)
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
