"""Dask shift_sum family, blockwise: channel and shifted axes single chunks, the result lazy."""

from __future__ import annotations

from functools import partial
from typing import Any

from ... import extend
from ..._ops.shift_sum import ShiftSumArgs, shift_sum, shift_sum_adjoint, shift_sum_pinv
from ...extend import Priority
from .operands import SUMMARY, blockwise


def _geometry(a: ShiftSumArgs) -> dict[str, Any]:
    return {"step": list(a.offsets), "axis": a.axis, "channel_axis": a.channel_axis}


def forward(a: ShiftSumArgs) -> Any:
    """``shift_sum`` of each block (channels and the shifted axis whole), lazily."""
    ax, cax = a.axis, a.channel_axis
    adjust = {ax: a.array.shape[ax] + max(a.offsets), cax: 1}
    # Blocks keep the channel axis: dropping it in blockwise would make Dask concatenate
    # (copy) every input block along it first.
    y = blockwise(shift_sum, a, (cax, ax), adjust, keepdims=True, **_geometry(a))
    return y if a.keepdims else y.squeeze(axis=cax)


def _transposed(fn: Any, a: ShiftSumArgs) -> Any:
    """`fn` (``shift_sum_adjoint``, or ``shift_sum_pinv``: ``Phi`` only mixes along the
    shifted axis) of each block (the shifted axis whole), lazily."""
    adjust = {a.axis: a.shape[a.axis], a.channel_axis: len(a.offsets)}
    return blockwise(fn, a, (a.axis,), adjust, keepdims=True, **_geometry(a))


for _op, _impl in (
    ("shift_sum", forward),
    ("shift_sum_adjoint", partial(_transposed, shift_sum_adjoint)),
    ("shift_sum_pinv", partial(_transposed, shift_sum_pinv)),
):
    extend.register(
        _op, "dask_blockwise", libraries=["dask"], priority=Priority.SPECIALIZED, summary=SUMMARY
    )(_impl)
