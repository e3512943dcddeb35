"""Dask shear / unshear, blockwise: only the channel and shifted axes become single
chunks, so the work stays parallel; the result stays lazy.
"""

from __future__ import annotations

import functools
from typing import Any

from ... import extend
from ..._ops.shear import ShearArgs, shear, unshear
from ...extend import Priority
from .operands import SUMMARY, blockwise


def _blockwise(fn: Any, a: ShearArgs) -> Any:
    """``fn`` (shear or unshear) of each block, lazily; every block's call normalises
    the offsets, as one list, to itself."""
    step: list[Any] = list(a.offsets)
    if a.fractions is not None:
        step = [n + f for n, f in zip(a.offsets, a.fractions, strict=True)]
    whole, adjust = (a.channel_axis, a.axis), {a.axis: a.shape[a.axis]}
    return blockwise(fn, a, whole, adjust, step=step, axis=a.axis, channel_axis=a.channel_axis)


for _op, _fn in (("shear", shear), ("unshear", unshear)):
    extend.register(
        _op, "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=SUMMARY
    )(functools.partial(_blockwise, _fn))
