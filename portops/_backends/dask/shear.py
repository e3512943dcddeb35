"""Dask shear / unshear: blockwise, each block run by its own library's fast path.

Only the channel axis (each channel has its own offset) and the shifted axis (the
channels move along it) become single chunks; every other axis keeps its chunks, so
the work stays parallel over batch and rows. The result stays lazy.
"""

from __future__ import annotations

from typing import Any

from ... import extend
from ..._ops.shear import ShearArgs, shear, unshear
from ...extend import Priority
from .operands import blockwise


def _blockwise(a: ShearArgs, fn: Any) -> Any:
    # The normalised offsets as one list that each block's call normalises to itself.
    step: list[Any] = list(a.offsets)
    if a.fractions is not None:
        step = [n + f for n, f in zip(a.offsets, a.fractions, strict=True)]
    whole, adjust = (a.channel_axis, a.axis), {a.axis: a.shape[a.axis]}
    return blockwise(fn, a, whole, adjust, step=step, axis=a.axis, channel_axis=a.channel_axis)


def shear_blockwise(a: ShearArgs) -> Any:
    """``shear`` of each block (channels and the shifted axis whole), lazily."""
    return _blockwise(a, shear)


def unshear_blockwise(a: ShearArgs) -> Any:
    """``unshear`` of each block (channels and the shifted axis whole), lazily."""
    return _blockwise(a, unshear)


_SUMMARY = "blockwise over the other axes; each block runs its library's fast path"
extend.register(
    "shear", "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=_SUMMARY
)(shear_blockwise)
extend.register(
    "unshear", "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=_SUMMARY
)(unshear_blockwise)
