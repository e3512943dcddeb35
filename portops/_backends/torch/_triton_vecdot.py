"""Triton row reduction for vecdot on CUDA tensors: ``sum(x1 * x2)`` in one pass,
splitting the contracted axis when there are too few rows to fill the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..._tables import CUDA
from ._triton_launch import ACCUMULATOR, Launcher

__all__ = ["plan_rows"]


@triton.jit
def _vecdot_rows(
    a_ptr, b_ptr, out_ptr, rows, length, a_r, a_k, b_r, b_k,
    CHUNK: tl.constexpr, ACC: tl.constexpr, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    start = tl.program_id(1) * CHUNK
    stop = tl.minimum(start + CHUNK, length)
    acc = tl.zeros([BLOCK_R, BLOCK_K], dtype=ACC)
    live = r < rows
    for k0 in range(0, CHUNK, BLOCK_K):
        k = start + k0 + tl.arange(0, BLOCK_K)[None, :]
        ok = live & (k < stop)
        a = tl.load(a_ptr + r * a_r + k * a_k, mask=ok, other=0).to(ACC)
        b = tl.load(b_ptr + r * b_r + k * b_k, mask=ok, other=0).to(ACC)
        acc += a * b
    total = tl.sum(acc, axis=1)
    rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    if SPLIT:
        tl.store(out_ptr + rr * tl.num_programs(1) + tl.program_id(1), total, mask=rr < rows)
    else:
        tl.store(out_ptr + rr, total.to(out_ptr.dtype.element_ty), mask=rr < rows)


def plan_rows(
    rows: int,
    length: int,
    strides: tuple[int, int, int, int],
    dtype: torch.dtype,
    device: torch.device,
    sms: int,
    shape: tuple[int, ...],
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """``out[r] = sum_k a[r, k] * b[r, k]`` for 2-D views with the given strides, shaped
    `shape`: a function of the two base tensors (the strides' origin), or None."""
    acc = ACCUMULATOR.get(dtype) if dtype.is_floating_point else None  # floating dtypes only
    if acc is None or rows == 0 or length == 0:
        return None
    tile = CUDA["vecdot_tile"]
    block_k = min(triton.next_power_of_2(length), CUDA["row_block_max"])
    block_r = max(1, min(triton.next_power_of_2(rows), tile // block_k))
    row_programs = math.ceil(rows / block_r)
    splits = 1
    enough = CUDA["programs_per_sm"] * sms  # programs that fill the GPU
    if row_programs < enough and length > 4 * block_k:
        # Few long rows: split the contracted axis (chunks of 4+ blocks) to fill every SM.
        splits = min(math.ceil(enough / row_programs), math.ceil(length / (4 * block_k)))
    chunk = math.ceil(math.ceil(length / splits) / block_k) * block_k
    splits = math.ceil(length / chunk)
    if row_programs > 2**31 - 1 or splits > 65535:
        return None
    warps = 8 if block_r * block_k >= tile else 4  # a full tile: twice the warps
    acc_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    launch = Launcher(
        _vecdot_rows, (row_programs, splits, 1), (rows, length, *strides),
        dict(CHUNK=chunk, ACC=acc, SPLIT=splits > 1, BLOCK_R=block_r, BLOCK_K=block_k,
             num_warps=warps),
        device.index,
    )  # fmt: skip

    def run(a: Any, b: Any) -> torch.Tensor:
        if splits == 1:
            out = torch.empty(shape, dtype=dtype, device=device)
            launch(a, b, out)
            return out
        partial = torch.empty(rows, splits, dtype=acc_dtype, device=device)
        launch(a, b, partial)
        return partial.sum(-1).to(dtype).view(shape)

    return run
