"""PyTorch einsum (CPU and CUDA): strategies ``lowering`` (batched matmuls, every
feature), ``einsum`` (``torch.einsum``: faster on CUDA, half precision) and
``numpy_loop`` (CPU, no feature: ``numpy.einsum`` on views where it beats both).
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat.torch as compat_torch
import numpy as np
import torch

from ... import _torch_state, extend
from ..._arrays import TORCH as LIBRARY
from ..._einsum.execute import ArrayAPIOps, cast, run, with_casts
from ..._einsum.options import (
    check_cast,
    check_keywords,
    check_operand_casts,
    with_order,
    write_out,
)
from ..._einsum.parse import label_names, parse, spell
from ..._einsum.plan import Plan
from ..._einsum.program import Program, Programs, Spelling, runner
from ..._ops.einsum import EinsumArgs, result_dtype_of, split_operands
from ..._strategy import FEATURES, Strategies, Strategy
from ..._tables import TORCH
from ...extend import Priority
from ..numpy.einsum import c_einsum, loop_order, loop_wins, native_applies, tiny
from .views import NUMPY_DTYPES, numpy_view

# torch has no CPU GEMM or typed sum for these: computed in the wider dtype, wrapped back.
_WIDER = {torch.uint16: torch.int64, torch.uint32: torch.int64, torch.uint64: torch.int64}
_WIDER[torch.complex32] = torch.complex64


def integer_matmul(a: Any, b: Any) -> Any:
    """matmul by multiply-and-sum over K, exact in any dtype (CUDA GEMMs refuse
    integers). The broadcast temporary is ``batch * M * K * N`` elements."""
    return torch.sum(a.unsqueeze(-1) * b.unsqueeze(-3), dim=-2, dtype=a.dtype)


def _as_batch_of_matrices(x: Any) -> Any:
    """`x` as one ``[batch, rows, cols]`` array for bmm: a view, else one copy keeping
    the unit-stride axis innermost."""
    rows, cols = x.shape[-2], x.shape[-1]
    batch = math.prod(x.shape[:-2])  # not -1: ambiguous when rows or cols is 0
    if x.stride(-2) == 1 and x.stride(-1) != 1 and rows > 1:
        return x.transpose(-1, -2).reshape(batch, cols, rows).transpose(1, 2)
    return x.reshape(batch, rows, cols)


class TorchOps(ArrayAPIOps):
    """Plan primitives as torch calls (Tensor methods unbound: one frame less each)."""

    reshape = staticmethod(torch.Tensor.reshape)  # type: ignore[assignment]
    permute = staticmethod(torch.Tensor.permute)  # type: ignore[assignment]

    def sum(self, x: Any, axes: tuple[int, ...]) -> Any:
        return torch.sum(x, dim=axes, dtype=x.dtype)

    def matmul(self, a: Any, b: Any) -> Any:
        if not a.is_cpu and not (a.dtype.is_floating_point or a.dtype.is_complex):
            return integer_matmul(a, b)
        if a.ndim >= 3 and a.shape[:-2] == b.shape[:-2]:  # bmm, minding the layout
            r = torch.bmm(_as_batch_of_matrices(a), _as_batch_of_matrices(b))
            return r.view(*a.shape[:-2], a.shape[-2], b.shape[-1])
        return torch.matmul(a, b)


_OPS = TorchOps(compat_torch)


def _lowering_plan(a: EinsumArgs) -> Any:
    """The lowering, written out as straight-line code from the signature's second call."""
    if (wide := _WIDER.get(a.dtype)) is not None:
        widened, dtype = _lowering_plan(a._replace(dtype=wide)), a.dtype
        return lambda *operands: widened(*operands).to(dtype)
    plan, plan_for = a.plan, a.lowering.plan_for

    def lowered(*operands: Any) -> Any:
        return run(plan, operands, _OPS, plan_for)

    body: Any = lowered
    if not a.lowering.slices:
        dtype, device = a.dtype, a.operands[0].device.type  # not the operands: kept
        body = runner(lambda: _program_of(plan, dtype, device), lowered)
    return with_casts(a, _OPS, torch.clone, body)


def _einsum_plan(a: EinsumArgs) -> Any:
    """torch.einsum with its subscripts fixed."""
    subscripts, einsum = a.subscripts, torch.einsum
    return with_casts(a, _OPS, torch.clone, lambda *operands: einsum(subscripts, *operands))


SPELLING = Spelling(
    module=torch,
    permute="{a}.permute({perm!r})",
    swap="{a}.transpose(-1, -2)",
    sum="{a}.sum({axes!r}, dtype=_dtype)",
    dot="xp.dot({a}, {b})",
    mv="xp.mv({a}, {b})",
    vm="xp.mv({b}.t(), {a})",
    mm="xp.mm({a}, {b})",
    bmm="xp.bmm({a}, {b})",
    batched="xp.matmul({a}, {b})",
    outer="xp.outer({a}, {b})",
    ops_calls=3,  # TorchOps primitives: permutes, views, then the call
)
_PROGRAMS = Programs(SPELLING)


def _program_of(plan: Plan, dtype: Any, device: str) -> Program:
    # CUDA's dot/mv/mm refuse integers: those GEMMs stay with TorchOps.matmul.
    native = device == "cpu" or dtype.is_floating_point or dtype.is_complex
    return _PROGRAMS.get(plan, dtype, _OPS, (device,), native)


def _einsum_applies(a: EinsumArgs) -> str | None:
    """None when torch.einsum can run the call, else why not."""
    if a.lowering.slices:
        return "memory_limit needs chunking, which torch.einsum does not do"
    if not a.subscripts.isascii():
        return "more labels than torch.einsum's 52 letters"
    if a.dtype == torch.bool:
        return "torch.einsum does not take bool operands"
    if not (a.dtype.is_floating_point or a.dtype.is_complex) or a.dtype in _WIDER:
        return "integers (summed in int64, refused on CUDA) or complex32 (no GEMM)"
    return None


def _numpy_loop_plan(a: EinsumArgs) -> Any:
    """numpy.einsum's loop on zero-copy views, its subscripts and loop order fixed."""
    subscripts = a.subscripts
    order = loop_order(subscripts, [numpy_view(x) for x in cast(a.operands, a.dtype, _OPS)])

    def loop(*operands: Any) -> Any:
        r = c_einsum(subscripts, *[numpy_view(x) for x in operands], order=order)
        return torch.from_numpy(np.array(r))  # a copy: never a view of an operand

    dtype = a.dtype
    return (lambda *ops: loop(*cast(ops, dtype, _OPS))) if a.casts else loop  # copies


def _shares_dtypes(a: EinsumArgs) -> bool:
    return a.dtype in NUMPY_DTYPES and all(x.dtype in NUMPY_DTYPES for x in a.operands)


def _numpy_loop_applies(a: EinsumArgs) -> str | None:
    if a.operands[0].device.type != "cpu":
        return "not on the CPU"
    if not _shares_dtypes(a):
        return "a dtype NumPy does not share at full precision"
    return native_applies(a)


def _numpy_loop_wins(a: EinsumArgs) -> str | None:
    """None when NumPy's loop on views beats the lowering here, else why not."""
    if not _shares_dtypes(a):
        return "a dtype NumPy does not share at full precision"
    # Not for outer products: torch's multiply is faster there than NumPy's loop.
    reason = loop_wins(a, outer_products=False)
    if reason is not None:
        return reason
    if tiny(a):
        calls = TORCH["einsum_loop_calls"] * max(a.lowering.n_operands - 1, 1)
        program = _program_of(a.plan, a.dtype, a.operands[0].device.type)
        if not a.casts and program.calls <= calls:
            return "tiny, and the lowering is as few torch calls as the loop's own overhead"
        return None
    if not any(step.kind == "multiply-and-sum" for step in a.plan.steps):
        # ``ij->i``, 2048^2 float32: 0.33 ms against 0.65 ms in the loop.
        return "no product to fuse: torch's own reduction reads the operand once, threaded"
    return None


def _needs(a: EinsumArgs) -> frozenset[str]:
    return _torch_state.needs(tuple(a.operands))


def choose(a: EinsumArgs, device: str | None = None) -> tuple[str, str]:
    """(strategy, rule) of a torch einsum call (on `device`, by default the operands')."""
    device = a.operands[0].device.type if device is None else device
    if a.dtype in _WIDER:
        return "lowering", f"no torch GEMM for {a.dtype}: computed in {_WIDER[a.dtype]}, cast back"
    if a.dtype in (torch.float16, torch.bfloat16) and _einsum_applies(a) is None:
        return "einsum", "half precision: torch.einsum's GEMMs round each sum once, as torch does"
    if device == "cuda":
        if (a.dtype.is_floating_point or a.dtype.is_complex) and _einsum_applies(a) is None:
            return "einsum", "CUDA, floating dtype: torch.einsum's own batched GEMMs"
        return "lowering", "the batched-matmul lowering with torch's calls"
    if _needs(a):
        return "lowering", "the call needs autograd, torch.func or compile: torch's calls"
    reason = _numpy_loop_wins(a) if device == "cpu" else "not on the CPU"
    if reason is None:
        return "numpy_loop", "NumPy's fused loop on views reads each operand once"
    return "lowering", reason


STRATEGIES = Strategies(
    [
        Strategy(
            "lowering",
            "each pairwise step one batched matmul with torch's calls; every feature",
            _lowering_plan,
            FEATURES,
        ),
        Strategy(
            "einsum",
            "torch.einsum itself; every feature",
            _einsum_plan,
            FEATURES,
            applies=_einsum_applies,
        ),
        Strategy(
            "numpy_loop",
            "numpy.einsum's C loop on zero-copy views (CPU): no temporaries",
            _numpy_loop_plan,
            applies=_numpy_loop_applies,
        ),
    ],
    choose=choose,
    needs=_needs,
)

extend.register(
    "einsum",
    "torch",
    libraries=["torch"],
    priority=Priority.SPECIALIZED,
    summary="batched-matmul lowering, torch.einsum (CUDA) or NumPy's loop on views (CPU)",
    strategies=STRATEGIES,
)


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]
def _traced_facts(
    key: Any, ndims: tuple[int, ...], dtypes: tuple[Any, ...], keywords: tuple[Any, ...]
) -> tuple[str, Any, bool, str]:
    """(equation, result dtype, may-alias, order) of a traced call, found outside the graph."""
    dtype, casting, order, out_dtype = keywords
    casting, order, wanted = check_keywords(casting, order, dtype)
    if wanted is not None:
        check_operand_casts(dtypes, wanted, casting)
    eq = parse(key, ndims)
    letters = spell(eq.inputs, eq.output, label_names([x for t in eq.inputs for x in t]))
    result = result_dtype_of(compat_torch, dtypes, wanted)
    if out_dtype is not None:
        check_cast("the result", result, out_dtype, casting)
    return letters, result, eq.may_alias(), order


def _summed_products(letters: str, *operands: Any) -> Any:
    """torch.einsum without GEMMs (CUDA has none for integers): operands multiplied in one
    at a time, each label summed out once no later operand or the output holds it."""
    inputs, out = letters.split("->")
    terms, have, acc = inputs.split(","), "", operands[0].new_ones(())
    for n, (term, x) in enumerate(zip(terms, operands, strict=True)):
        later = out + "".join(terms[n + 1 :])
        both = have + "".join(c for c in dict.fromkeys(term) if c not in have and c in later)
        mine = "".join(c for c in both if c in term)
        x = torch.einsum(f"{term}->{mine}", x)
        x = x.reshape([x.shape[mine.index(c)] if c in mine else 1 for c in both])
        acc = acc.reshape(acc.shape + (1,) * (len(both) - len(have))) * x
        have = "".join(c for c in both if c in later)
        acc = torch.einsum(f"{both}->{have}", acc)
    return torch.einsum(f"{have}->{out}", acc)


def traced(operands: tuple[Any, ...], out: Any, keywords: tuple[Any, ...]) -> Any:
    """einsum while torch.compile traces: torch.einsum, which dynamo traces at every size
    (no planning, caches or dispatch in the graph; memory_limit makes no chunks)."""
    key, ops = split_operands(operands)
    ndims, dtypes = tuple(x.ndim for x in ops), tuple(x.dtype for x in ops)
    out_dtype = None if out is None else out.dtype
    letters, result, alias, order = _traced_facts(key, ndims, dtypes, (*keywords, out_dtype))
    ops = tuple(x.to(result) for x in ops)
    if result == torch.bool:  # torch.einsum takes no bool: count the true products
        r = torch.einsum(letters, *[x.double() for x in ops]) != 0
    elif not (result.is_floating_point or result.is_complex) or result in _WIDER:
        # torch.einsum sums integers in int64 (and fails mixing int64 sums with narrower
        # products): compute in int64, then wrap around to the result type as NumPy does.
        wide = _WIDER.get(result, torch.int64)
        einsum = torch.einsum if ops[0].is_cpu or wide != torch.int64 else _summed_products
        r = einsum(letters, *[x.to(wide) for x in ops]).to(result)
    else:
        r = torch.einsum(letters, *ops)
    r = r.clone() if alias else r
    return with_order(r, order, LIBRARY, ops) if out is None else write_out(r, out, LIBRARY, None)
