"""vecdot on torch CPU tensors. ``torch.linalg.vecdot`` writes the product and reads it
back (three times the bytes of a fused pass): calls that need only the result read less;
calls that need autograd, ``torch.func`` or compile keep to torch's own calls."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ... import _machine, _torch_state, extend
from ..._ops.vecdot import VecdotArgs
from ..._strategy import FEATURES, Strategies, Strategy
from ..._tables import NUMPY, TORCH
from ...extend import Priority
from ..numpy import vecdot as numpy_vecdot
from .views import NUMPY_DTYPES, numpy_view

__all__ = ["STRATEGIES", "choose"]

Run = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_REAL = frozenset({torch.float32, torch.float64})
# torch.linalg.vecdot keeps these dtypes; others are summed in the accumulation dtype.
_LINALG = _REAL | {torch.complex64, torch.complex128}
_UNSIGNED = frozenset({torch.uint16, torch.uint32, torch.uint64})
_ACCUMULATE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
_ACCUMULATE[torch.complex32] = torch.complex64  # (torch has no complex32 sum on the CPU)
# torch's at::internal::GRAIN_SIZE: its CPU kernels use one thread below this many elements.
GRAIN = 32768

# embedding_bag's per-sample-weights backward with identity indices: threaded row dots;
# private and underivable, so only where torch has it and for calls needing no gradient.
try:
    _ROW_DOTS: Any = torch.ops.aten._embedding_bag_per_sample_weights_backward.default
except (AttributeError, RuntimeError):
    _ROW_DOTS = None


def _plan_native(a: VecdotArgs) -> Run:
    axis, keepdims, dtype = a.axis, a.keepdims, a.dtype
    if a.x1.dtype is a.x2.dtype and dtype in _LINALG:
        if axis == -1 and not keepdims:
            return torch.linalg.vecdot  # type: ignore[no-any-return]

        def linalg(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
            r: torch.Tensor = torch.linalg.vecdot(x1, x2, dim=axis)
            return r.unsqueeze(axis) if keepdims else r

        return linalg
    # Half precision summed in float32; unsigned in int64 (same result modulo the range).
    acc = torch.int64 if dtype in _UNSIGNED else _ACCUMULATE.get(dtype, dtype)

    def mul_sum(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x1, x2 = x1.to(acc), x2.to(acc)
        if acc.is_complex:
            x1 = x1.conj()
        r = torch.sum(x1 * x2, dim=axis, keepdim=keepdims, dtype=acc)
        return r.view(torch.uint64) if dtype == torch.uint64 else r.to(dtype)

    return mul_sum


def _plan_mv(a: VecdotArgs) -> Run:
    """A single vector (1-d) against a matrix or a stack of them."""
    op = torch.mv if max(a.x1.ndim, a.x2.ndim) == 2 else torch.matmul
    return op if a.x2.ndim == 1 else lambda x1, x2: op(x2, x1)


def _view(x: torch.Tensor, dtype: torch.dtype) -> Any:
    """A NumPy view of `x` in `dtype` (of a copy where its dtype differs)."""
    return numpy_view(x if x.dtype is dtype else x.to(dtype))


def _plan_numpy(a: VecdotArgs) -> Run:
    """NumPy's choice of strategy on zero-copy views; the result wraps NumPy's array."""
    dtype = a.dtype
    run = numpy_vecdot.plan(_view(a.x1, dtype), _view(a.x2, dtype), a)
    return lambda x1, x2: torch.from_numpy(run(_view(x1, dtype), _view(x2, dtype)))


def _numpy_threads(a: VecdotArgs) -> int:
    v1, v2 = _view(a.x1, a.dtype), _view(a.x2, a.dtype)
    return numpy_vecdot.threads(v1, v2, a.axis, numpy_vecdot.choose(v1, v2, a.axis)[0])


def _plan_row_dots(a: VecdotArgs) -> Run:
    """One BLAS dot per row; the identity index (4 bytes a row) is built once."""
    shape = a.x1.shape
    n, rows = shape[-1], math.prod(shape[:-1])
    index = torch.arange(rows, dtype=torch.int32 if rows < 2**31 else torch.int64)
    out_shape = (*shape[:-1], 1) if a.keepdims else shape[:-1]
    op = _ROW_DOTS
    if len(shape) == 2 and not a.keepdims:  # (each view costs about 1.5 us)
        return lambda x1, x2: op(x1, x2, index, index, index, 0)

    def row_dots(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        r: torch.Tensor = op(x1.view(rows, n), x2.view(rows, n), index, index, index, 0)
        return r.view(out_shape)  # 0: embedding_bag's mode "sum"

    return row_dots


def _plan_bmm(a: VecdotArgs) -> Run:
    """Each pair of vectors as a (1, n) by (n, 1) product: one batched GEMM over the rows."""
    keepdims = a.keepdims

    def bmm(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        r = torch.matmul(x1.unsqueeze(-2), x2.unsqueeze(-1)).squeeze(-1)
        return r if keepdims else r.squeeze(-1)

    return bmm


def _plan_columns(a: VecdotArgs) -> Run:
    """Summed one column (a contiguous slice along the axis) at a time: streaming passes."""
    axis, keepdims = a.axis, a.keepdims

    def columns(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        cols1, cols2 = x1.unbind(axis), x2.unbind(axis)
        out = torch.mul(cols1[0], cols2[0])
        for c1, c2 in zip(cols1[1:], cols2[1:], strict=True):
            out.addcmul_(c1, c2)
        return out.unsqueeze(axis) if keepdims else out

    return columns


def _real(a: VecdotArgs) -> str | None:
    if a.x1.dtype is not a.x2.dtype or a.x1.dtype not in _REAL:
        return "needs one dtype of torch.float32, torch.float64"
    return None


def _mv_applies(a: VecdotArgs) -> str | None:
    many, one = (a.x1, a.x2) if a.x2.ndim == 1 else (a.x2, a.x1)
    if a.axis != -1 or a.keepdims or one.ndim != 1 or many.ndim == 1 or one.shape[0] < 2:
        return "not a 1-d vector against a matrix along the last axis"
    return _real(a)


def _numpy_applies(a: VecdotArgs) -> str | None:
    if {a.dtype, a.x1.dtype, a.x2.dtype} - NUMPY_DTYPES:
        return "a dtype NumPy does not share"
    return None


def _bmm_applies(a: VecdotArgs) -> str | None:
    if a.axis != -1 or a.x1.shape != a.x2.shape:
        return "needs equal shapes, contracted along the last axis"
    return _real(a)


def _row_dots_applies(a: VecdotArgs) -> str | None:
    if _ROW_DOTS is None:
        return "this torch has no per-sample-weights backward of embedding_bag"
    why = _bmm_applies(a)
    if why is not None or a.x1.stride(-1) != 1 or a.x2.stride(-1) != 1:
        return why or "needs vectors contiguous along the last axis"
    try:
        for x in (a.x1, a.x2):
            x.view(-1, x.shape[-1])
    except RuntimeError:
        return "the leading dimensions do not merge into rows"
    return None


def _columns_applies(a: VecdotArgs) -> str | None:
    if a.x1.shape != a.x2.shape or a.x1.shape[a.axis] == 0:
        return "needs equal shapes and vectors of at least one element"
    return _real(a)


def _threaded(
    name: str, summary: str, plan: Callable[[VecdotArgs], Run], applies: Any = None
) -> Strategy:
    """A strategy on torch's threads (one below ``GRAIN``) keeping every autograd feature."""
    return Strategy(name, summary, plan, FEATURES, _torch_threads, applies)


def _torch_threads(a: VecdotArgs) -> int:
    return torch.get_num_threads() if max(a.x1.numel(), a.x2.numel()) >= GRAIN else 1


def _traffic_wins(threads: int, fits: bool, traffic: float) -> str | None:
    """Why torch's threads beat NumPy's one-thread loop on inputs past the cores' L2
    (``traffic``: ``native_traffic``), or None."""
    if fits or threads <= traffic:
        return None
    return f"{threads} threads move torch's {traffic}x traffic before NumPy's one"


def _einsum_loses(
    vectors: int, short: bool, unit: bool, fits: bool, threads: int, few: int
) -> str | None:
    """Why torch's call beats NumPy's einsum loop on these vectors (``few``:
    ``vecdot_few``), or None."""
    if vectors < few:
        return "few strided vectors: einsum's loop across them would be short"
    if fits and (threads > 1 or not (short or unit)):
        return "vectors in the cores' L2 (strided rows, or threads): torch's reads"
    return None


def _direct() -> Callable[[Any, Any], Any]:
    """Calls :func:`choose` always sends to one torch call, told by a few checks: a real
    vector against a matrix (``mv``); inputs below ``views_min`` elements, or below
    ``GRAIN`` unless their rows are contiguous and short, and vectors for einsum's loop
    that are few (strided) or fit the cores' L2 (``native``); else None (the full path,
    which also explains refusals)."""
    views_min, short_row, few = TORCH["views_min"], NUMPY["column_bytes"], NUMPY["vecdot_few"]
    long_row, traffic, tensor = NUMPY["vecdot_short"], TORCH["native_traffic"], torch.Tensor
    vecdot, mv, grad_enabled = torch.linalg.vecdot, torch.mv, torch.is_grad_enabled

    def rule_native(n: int, size: int, item: int, unit: bool) -> bool:
        """choose's verdict past its grain rule, for equal real shapes NumPy would sum by
        einsum's loop (its rules, shared); False (the full path) past an L2 of vectors."""
        vectors, short = size // n, n * item <= short_row
        if vectors < 2 or (unit and (short or vectors <= few)):
            return False  # NumPy's kernel: by column, or np.vecdot
        m = _machine.current()
        if vectors * item >= m.l2:  # (the rule's strided columns past L2, by column)
            return False
        threads, fits = torch.get_num_threads(), 2 * size * item < m.l2 * m.cores
        why = _traffic_wins(threads, fits, traffic)
        return (why or _einsum_loses(vectors, short, unit, fits, threads, few)) is not None

    def run(x1: Any, x2: Any) -> Any:
        if type(x2) is not tensor:
            return None
        s1, s2 = x1.shape, x2.shape  # few reads: each costs ~0.1 us
        if len(s1) == len(s2):
            if not s1 or (n := s1[-1]) != s2[-1]:
                return None  # (torch would broadcast unequal lengths)
            if (x1.requires_grad or x2.requires_grad) and grad_enabled():
                pass  # gradients: torch's own call at every size (choose's needs rule)
            elif (size := x1.numel() if s1 == s2 else max(x1.numel(), x2.numel())) >= GRAIN:
                # the rule's choice hangs on the layout
                if s1 != s2 or n < 2:
                    return None
                unit = x1.stride()[-1] == 1 == x2.stride()[-1]
                if (unit and n >= long_row) or x1.dtype not in _REAL:
                    return None  # (contiguous rows for np.vecdot or BLAS: the cheap refusal)
                if not rule_native(n, size, x1.element_size(), unit):
                    return None
            elif size >= views_min and n * x1.element_size() <= short_row:
                if s1 != s2 or n < 2 or x1.dtype not in _REAL:
                    return None
                if x1.stride()[-1] == 1 == x2.stride()[-1]:
                    return None  # contiguous short rows: NumPy's columns, or other rules
            dtypes = _LINALG
        elif len(s2) == 1 and len(s1) == 2 and s2[0] > 1:
            dtypes = _REAL
        else:
            return None
        dtype = x1.dtype
        if x2.dtype is not dtype or dtype not in dtypes or not x1.is_cpu:
            return None
        try:  # (x2 on another device: torch refuses, and the full path explains)
            return vecdot(x1, x2) if dtypes is _LINALG else mv(x1, x2)
        except RuntimeError:
            return None

    return run


STRATEGIES = Strategies(
    [
        _threaded("native", "torch.linalg.vecdot, or product and sum wider", _plan_native),
        _threaded("mv", "one vector against many: torch's GEMV", _plan_mv, _mv_applies),
        Strategy(
            "numpy",
            "NumPy's fused loops (or BLAS) on zero-copy views: each input read once",
            _plan_numpy,
            threads=_numpy_threads,
            applies=_numpy_applies,
        ),
        Strategy(
            "row_dots",
            "one BLAS dot per long contiguous vector, on torch's threads",
            _plan_row_dots,
            threads=lambda a: torch.get_num_threads(),
            applies=_row_dots_applies,
        ),
        _threaded(
            "bmm",
            "short vectors: one batched (1, n) by (n, 1) GEMM over the rows",
            _plan_bmm,
            _bmm_applies,
        ),
        _threaded(
            "columns",
            "short vectors along a strided axis: a streaming pass per column",
            _plan_columns,
            _columns_applies,
        ),
    ],
    choose=lambda a: choose(a),
    needs=lambda a: _torch_state.needs((a.x1, a.x2)),
    direct=_direct,
)


def choose(a: VecdotArgs) -> tuple[str, str]:
    """(strategy, rule) for a call on CPU tensors."""
    x1, x2, axis = a.x1, a.x2, a.axis
    if _mv_applies(a) is None:
        return "mv", "one vector against many: torch's GEMV"
    if STRATEGIES.needs(a):
        return "native", "the call needs autograd, torch.func or compile: torch's own calls"
    if _numpy_applies(a) is not None:
        return "native", "a dtype without a NumPy view: torch's product and sum"
    size = max(x1.numel(), x2.numel())
    if size < TORCH["views_min"]:
        return "native", f"below {TORCH['views_min']} elements the views cost more than they save"
    n, item = x1.shape[axis], x1.element_size()
    # Rows this short torch sums slowly; NumPy sums them by column (contiguous) or across.
    short = n * item <= NUMPY["column_bytes"]
    unit = n < 2 or x1.stride(axis) == 1 == x2.stride(axis)
    if size < GRAIN and not (short and unit):
        return "native", f"below {GRAIN} elements (torch's grain) its calls wake no thread: faster"
    m = _machine.current()
    threads = torch.get_num_threads()
    # Long vectors: a BLAS dot each on torch's threads, where NumPy's loop has one.
    long_rows = n * item >= TORCH["row_dots_bytes"]
    if long_rows and threads >= 2 and _row_dots_applies(a) is None:
        return "row_dots", "long contiguous vectors, several threads: a BLAS dot each"
    if _real(a) is None and x1.shape == x2.shape and n <= NUMPY["vecdot_short"]:
        c1, c2 = x1.select(axis, 0), x2.select(axis, 0)
        if c1.numel() * item >= m.l2 and c1.is_contiguous() and c2.is_contiguous():
            return "columns", "short vectors along a strided axis, columns past L2: by column"
    fits = (x1.numel() + x2.numel()) * item < m.l2 * m.cores
    if why := _traffic_wins(threads, fits, TORCH["native_traffic"]):
        return "native", why
    kernel = numpy_vecdot.choose(numpy_view(x1), numpy_view(x2), axis)[0]
    # NumPy's einsum loop (vectors under vecdot_short) on one thread; strided rows: 2x slower
    bmm = x1.stride(-1) == 1 == x2.stride(-1) and _bmm_applies(a) is None
    if kernel == "einsum" and bmm and threads >= 2 and not fits:
        return "bmm", "short contiguous vectors past the cores' L2: threaded batched GEMM"
    few, vectors = NUMPY["vecdot_few"], size // max(n, 1)
    if kernel == "einsum" and (why := _einsum_loses(vectors, short, unit, fits, threads, few)):
        return "native", why
    return "numpy", f"NumPy's fused loop on views ({kernel}) reads each input once"


extend.register(
    "vecdot",
    "torch_cpu",
    libraries=("torch",),
    devices=("cpu",),
    priority=Priority.SPECIALIZED,
    summary="NumPy's fused loops on views, BLAS row dots or torch's own calls; autograd",
    strategies=STRATEGIES,
)
