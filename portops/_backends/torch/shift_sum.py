"""PyTorch shift_sum family, CPU and CUDA: forward and adjoint as one
:class:`~.linear_op.LinearPair` (every torch feature); strategies ``slice_add``,
``numpy``, ``windows`` and ``triton``; large CPU results from :mod:`portops._buffers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from ... import _buffers as buffers
from ... import _machine, _torch_state, extend
from ..._arrays import namespace_of
from ..._generic import shift_sum as generic
from ..._kernels.geometry import linear_step
from ..._ops import shift_sum as ops
from ..._ops.shift_sum import ShiftSumArgs
from ..._plans import PlanCache
from ..._plans import key as plan_key
from ..._strategy import FEATURES, Strategies, Strategy
from ..._tables import TORCH
from ...extend import Priority
from ..numpy import shift_sum as numpy_shift_sum
from .linear_op import LinearPair, result_dtype
from .triton_loader import triton_kernels
from .views import NUMPY_FLOATING, numpy_view

__all__ = ["PAIR", "empty", "forward_kernel", "result_dtype", "x_shape", "y_shape"]

Run = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]
_HALF = (torch.float16, torch.bfloat16)
_GRAD = frozenset({"grad"})
# Integer masks stay in torch: NumPy promotes float32 with int32 to float64, torch does not.
_NUMPY_MASKS = NUMPY_FLOATING | {torch.bool}


def empty(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``; large CPU results come from portops' reused buffers."""
    if device.type == "cpu" and dtype not in _HALF and dtype != torch.bool:
        if math.prod(shape) * dtype.itemsize >= buffers.MIN_BYTES:
            np_dtype = torch.empty((), dtype=dtype).numpy().dtype
            return torch.from_numpy(buffers.empty(shape, np_dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def y_shape(x_shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    """Shape of the forward's result, channel axis kept with size 1."""
    offsets, axis, channel_axis = geometry
    shape = list(x_shape)
    shape[axis] += max(offsets)
    shape[channel_axis] = 1
    return shape


def x_shape(y_shape: list[int], geometry: tuple[Any, ...]) -> list[int]:
    """Shape of the adjoint's result from ``y``'s (channel axis of size 1)."""
    offsets, axis, channel_axis = geometry
    shape = list(y_shape)
    shape[axis] -= max(offsets)
    shape[channel_axis] = len(offsets)
    return shape


# ----------------------------------------------------------------------------- kernels
# Torch's own calls on normalised tensors (any device); each returns a new tensor.


def forward_kernel(
    x: torch.Tensor, offsets: list[int], axis: int, channel_axis: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """One slice-add (or ``addcmul_``) per channel into a zeroed ``y``."""
    out_dtype = result_dtype(x, mask)
    acc = torch.float32 if out_dtype in _HALF else out_dtype
    width = x.shape[axis]
    shape = y_shape(list(x.shape), (offsets, axis, channel_axis))
    y = torch.zeros(shape, dtype=acc, device=x.device)
    if mask is not None and mask.dtype != acc:
        mask = mask.to(acc)
    one_mask = mask is None or mask.shape[channel_axis] == 1
    for c, o in enumerate(offsets):
        xc = x.narrow(channel_axis, c, 1)
        if xc.dtype != acc:
            xc = xc.to(acc)
        window = y.narrow(axis, o, width)
        if mask is None:
            window.add_(xc)
        else:
            window.addcmul_(xc, mask if one_mask else mask.narrow(channel_axis, c, 1))
    return y if acc == out_dtype else y.to(out_dtype)


def _windows(
    shape_y: list[int], offsets: tuple[int, ...], axis: int, cax: int, dtype: torch.dtype
) -> Run:
    """The adjoint of ``y``s shaped `shape_y` (channel axis kept): every channel's window
    (times the conjugated mask), one ``unfold`` view in one call for even offsets."""
    shape = x_shape(shape_y, (offsets, axis, cax))
    width, k = shape[axis], axis - (axis > cax)
    lin = linear_step(offsets)
    step = 1 if len(offsets) == 1 else None if lin is None or lin[0] <= 0 else lin[0]

    def run(y: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        out = empty(shape, dtype, y.device)
        if out.numel() == 0:
            return out
        if m is not None and m.is_complex():
            m = m.conj()
        if step is not None:
            # unfold: window index -> channel axis, window contents -> shifted axis.
            view = y.squeeze(cax).unfold(k, width, step).movedim((k, -1), (cax, axis))
            return out.copy_(view) if m is None else torch.mul(view, m, out=out)
        for c, o in enumerate(offsets):
            window, dst = y.narrow(axis, o, width), out.narrow(cax, c, 1)
            if m is None:
                dst.copy_(window)
            else:
                torch.mul(window, m if m.shape[cax] == 1 else m.narrow(cax, c, 1), out=dst)
        return out

    return run


# ------------------------------------------------------------------- the operator pair


# The custom operators' own plans (torch.compile runs them without portops' front end).
_OP_PLANS = PlanCache("torch custom operators", 64)


def _op_kernel(adjoint: bool, arr: torch.Tensor, *rest: Any) -> torch.Tensor:
    """A custom operator's call (``offsets, axis, channel_axis, mask``; the channel axis of
    ``y`` kept, with size 1) by the kernel a plain call of these tensors takes."""
    offsets, axis, cax, mask = rest
    key = plan_key((adjoint, tuple(offsets), axis, cax), arr, mask)
    run = None if key is None else _OP_PLANS.get(key)
    if run is None:
        kind = "adjoint" if adjoint else "forward"
        a = ShiftSumArgs.make(kind, arr, tuple(offsets), axis, cax, mask, True, namespace_of(arr))
        choose = choose_adjoint if adjoint else choose_forward
        # Only torch.compile runs these operators: torch's kernels or Triton's, no NumPy.
        run = _kernel(choose(a, _GRAD)[0], a, adjoint)
        if key is not None:
            _OP_PLANS.put(key, run)
    return run(arr, mask)


def _public(adjoint: bool, arr: torch.Tensor, m: torch.Tensor | None, g: Any) -> torch.Tensor:
    """The public forward or adjoint, channel axis kept, called as the pair calls it."""
    kw = {"axis": g[1], "channel_axis": g[2], "mask": m, "keepdims": True}
    return (ops.shift_sum_adjoint if adjoint else ops.shift_sum)(arr, list(g[0]), **kw)


PAIR = LinearPair(
    ("shift_sum", "shift_sum_adjoint"),
    "SymInt[] offsets, SymInt axis, SymInt channel_axis, Tensor? mask",
    _op_kernel,
    lambda adjoint, shape, g: x_shape(shape, g) if adjoint else y_shape(shape, g),
    _public,
    (1, 2),
)


# ------------------------------------------------------------------------ kernel plans


_triton = partial(triton_kernels, "_triton_shift_sum")


def _triton_plan(name: str, a: ShiftSumArgs, alloc: list[int] | None = None) -> Run | None:
    """The Triton kernel of `name` for `a`'s layout, or None where none covers it. Its
    result keeps the channel axis, or has shape `alloc` (the same elements in order)."""
    kernels = _triton()
    if kernels is None:
        return None
    planner = getattr(kernels, f"plan_{name}")
    args = (tuple(a.offsets), a.axis, a.channel_axis, a.mask, alloc)
    try:
        run: Run = planner(a.array, *args)
    except NotImplementedError:
        try:
            contiguous = planner(a.array.contiguous(), *args)
        except NotImplementedError:
            return None
        run = lambda arr, mask: contiguous(arr.contiguous(), mask)  # noqa: E731
    if a.mask is None:
        return run
    dtype = a.mask.dtype

    def cast(arr: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None and mask.dtype != dtype:
            mask = mask.to(dtype)  # a bool mask, as validation cast it
        return run(arr, mask)

    return cast


def _numpy_record(a: ShiftSumArgs) -> ShiftSumArgs:
    """`a` (a forward call) on zero-copy NumPy views, the channel axis kept."""
    mask = None if a.mask is None else numpy_view(a.mask)
    x = numpy_view(a.array)
    return ShiftSumArgs.make("forward", x, a.offsets, a.axis, a.channel_axis, mask, True, np)


def _numpy_threads(a: ShiftSumArgs) -> int:
    record = _numpy_record(a)
    return numpy_shift_sum.FORWARD.choose(record).strategy.threads(record)


def _kernel(name: str, a: ShiftSumArgs, adjoint: bool) -> Run:
    """The kernel of strategy `name` for `a`'s signature (normalised tensors in, the
    channel axis kept)."""
    if name == "triton":
        run = _triton_plan("adjoint" if adjoint else "forward", a)
        if run is not None:
            return run
    if adjoint:
        return _windows(list(a.array.shape), a.offsets, a.axis, a.channel_axis, a.dtype)
    if name == "numpy":
        record = _numpy_record(a)
        kernel = numpy_shift_sum.forward_plan(record, numpy_shift_sum.choose_forward(record)[0])
        return lambda x, m: torch.from_numpy(
            kernel(numpy_view(x), None if m is None else numpy_view(m))
        )
    geometry = (list(a.offsets), a.axis, a.channel_axis)
    return lambda x, m: forward_kernel(x, *geometry, m)


# ------------------------------------------------------------------------ the strategies


def normalizer(a: Any) -> Callable[..., tuple[torch.Tensor, Any]]:
    """A call's (array, mask), raw or normalised, -> the pair the shift_sum or shear record
    `a` was made from: a ``y`` without its channel axis gets it, the mask is cast and reshaped."""
    ndim, cax, mask = len(a.shape), a.channel_axis, a.mask
    shape: Any = None if mask is None else tuple(mask.shape)
    dtype = None if mask is None else mask.dtype

    def normalize(arr: torch.Tensor, m: torch.Tensor | None) -> tuple[Any, Any]:
        if arr.ndim < ndim:
            arr = arr.unsqueeze(cax)
        if m is not None:
            m = m if m.dtype == dtype else m.to(dtype)
            m = m if m.shape == shape else m.reshape(shape)
        return arr, m

    return normalize


def _linear_plan(a: ShiftSumArgs, name: str, adjoint: bool) -> Run:
    """A plan of the forward or adjoint: bare kernel, the Function, or the custom operator."""
    normalize = normalizer(a)
    geometry = (list(a.offsets), a.axis, a.channel_axis)
    cax, squeeze = a.channel_axis, not adjoint and not a.keepdims
    needs = needs_of(a)
    kernel = None
    if name == "triton" and squeeze and not needs:
        # Allocated without the channel axis: no squeeze (a view) after the launch.
        kernel = _triton_plan("forward", a, list(a.shape))
        squeeze = kernel is None
    if kernel is None:
        kernel = _kernel(name, a, adjoint)
    core: Run = kernel
    if "compile" in needs:
        core = lambda arr, m: PAIR.call_op(adjoint, arr, m, geometry)  # noqa: E731
    elif needs:
        core = lambda arr, m: PAIR.apply(adjoint, arr, m, geometry, kernel)  # noqa: E731

    def run(arr: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        out = core(*normalize(arr, m))
        return out.squeeze(cax) if squeeze else out

    return run


def needs_of(a: Any) -> frozenset[str]:
    """The features a shift_sum or shear call (record `a`) needs."""
    return _torch_state.needs((a.array, a.mask))


def _threads(a: ShiftSumArgs) -> int:
    return 1 if a.array.device.type != "cpu" else int(torch.get_num_threads())


def _numpy_applies(a: ShiftSumArgs) -> str | None:
    x, mask = a.array, a.mask
    if x.device.type != "cpu" or x.dtype not in NUMPY_FLOATING or x.is_conj():
        return "needs a CPU tensor of a dtype NumPy shares"
    if mask is not None and (mask.dtype not in _NUMPY_MASKS or mask.is_conj()):
        return "needs a bool or floating mask (NumPy would promote an integer one further)"
    return None


def _triton_applies(a: ShiftSumArgs) -> str | None:
    if a.array.device.type != "cuda":
        return "CUDA tensors only"
    return None if _triton() is not None else "Triton is not installed"


def choose_forward(a: ShiftSumArgs, needs: frozenset[str] | None = None) -> tuple[str, str]:
    """(strategy, rule) of a forward call that needs `needs` (default: `a`'s needs)."""
    x = a.array
    needs = needs_of(a) if needs is None else needs
    if needs - _GRAD:
        return "slice_add", "the call needs forward-mode AD, torch.func or compile"
    if x.device.type == "cuda":
        if _triton() is not None:
            return "triton", "one Triton launch, mask fused"
        return "slice_add", "Triton is not installed: torch's slice-adds"
    if needs:
        return "slice_add", "the call needs gradients: it stays in torch (no NumPy views)"
    reason = _numpy_applies(a)
    if reason is not None:
        return "slice_add", reason
    m = _machine.current()
    nbytes = x.numel() * x.element_size()
    if nbytes <= TORCH["numpy_forward_l2"] * m.l2:
        return "numpy", (
            f"x within {TORCH['numpy_forward_l2']:g} of a core's L2: NumPy's kernels on "
            "views cost less than a torch add (and its dispatch) per channel"
        )
    record = _numpy_record(a)
    if numpy_shift_sum.rows_apply(record) is None:
        return "numpy", "contiguous rows: NumPy's compiled row loop sums each row in L1"
    if nbytes > m.cache and numpy_shift_sum.strided_rows(record):
        return "numpy", "strided rows past the caches: NumPy's cache-blocked gathers"
    return "slice_add", "torch's adds, each over its threads, into a cache-resident y"


def choose_adjoint(a: ShiftSumArgs, needs: frozenset[str] | None = None) -> tuple[str, str]:
    """(strategy, rule) of an adjoint call that needs `needs` (default: `a`'s needs)."""
    needs = needs_of(a) if needs is None else needs
    if a.array.device.type == "cuda" and not needs - _GRAD and _triton() is not None:
        return "triton", "one Triton launch, mask fused"
    return "windows", _WINDOWS


def choose_pinv(a: ShiftSumArgs) -> tuple[str, str]:
    if a.array.device.type == "cuda" and not needs_of(a) and _triton() is not None:
        return "triton", "fused: 1 / Phi over the mask's extent, then the scaled adjoint"
    return "composed", _COMPOSED


def _composed_pinv(a: ShiftSumArgs) -> Run:
    """``A^H (y / Phi)`` from the public operators (planned, differentiable)."""
    normalize = normalizer(a)
    template = a._replace(array=None, mask=None)  # the plan keeps no array alive

    def through(adjoint: bool) -> Callable[[ShiftSumArgs], torch.Tensor]:
        return lambda b: _public(adjoint, b.array, b.mask, (b.offsets, b.axis, b.channel_axis))

    forward, adjoint = through(False), through(True)

    def run(y: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        y, m = normalize(y, m)
        x: torch.Tensor = generic.pinv(template._replace(array=y, mask=m), forward, adjoint)
        return x

    return run


def _strategy(name: str, summary: str, adjoint: bool, **kw: Any) -> Strategy:
    return Strategy(name, summary, lambda a: _linear_plan(a, name, adjoint), **kw)


def _triton_strategy(what: str, adjoint: bool) -> Strategy:
    summary = f"CUDA: one Triton launch {what}, mask fused"
    return _strategy("triton", summary, adjoint, features=_GRAD, applies=_triton_applies)


_WINDOWS = "one strided copy (or multiply) of every window into the result"
_COMPOSED = "Phi by the forward, then the adjoint of y / Phi"
FORWARD = Strategies(
    [
        _strategy(
            "slice_add",
            "one in-place slice-add per channel into a cache-resident y (ATen threads)",
            False,
            features=FEATURES,
            threads=_threads,
        ),
        _strategy(
            "numpy",
            "NumPy's strategies on zero-copy views (small x, or strided rows past the cache)",
            False,
            threads=_numpy_threads,
            applies=_numpy_applies,
        ),
        _triton_strategy("(row or general kernel)", False),
    ],
    choose=choose_forward,
    needs=needs_of,
)
ADJOINT = Strategies(
    [
        _strategy("windows", _WINDOWS, True, features=FEATURES, threads=_threads),
        _triton_strategy("writing every channel's window", True),
    ],
    choose=choose_adjoint,
    needs=needs_of,
)
PINV = Strategies(
    [
        Strategy("composed", f"{_COMPOSED} (every feature)", _composed_pinv, FEATURES, _threads),
        Strategy(
            "triton",
            "CUDA: fused, one or two launches",
            lambda a: _triton_plan("pinv", a) or _composed_pinv(a),
            applies=_triton_applies,
        ),
    ],
    choose=choose_pinv,
    needs=needs_of,
)


def scatter_add(a: ShiftSumArgs) -> torch.Tensor:
    """One ``scatter_add_`` of every element to its shifted index (alternative)."""
    x, offsets, ax, cax, mask = a.array, a.offsets, a.axis, a.channel_axis, a.mask
    z = x if mask is None else x * mask
    out_dtype = z.dtype
    k = ax - (ax > cax)  # the shifted axis once channels are removed
    z = z.to(torch.float32 if out_dtype in _HALF else out_dtype).movedim(cax, k)
    width = z.shape[k + 1]
    merged = z.reshape(*z.shape[:k], len(offsets) * width, *z.shape[k + 2 :])
    cols = torch.arange(width, device=x.device)
    shift = torch.tensor(offsets, device=x.device)
    index = (shift[:, None] + cols[None, :]).reshape(-1)
    index = index.view([-1] + [1] * (merged.ndim - k - 1)).expand(merged.shape)
    shape = list(merged.shape)
    shape[k] = width + max(offsets)
    y = torch.zeros(shape, dtype=merged.dtype, device=x.device)
    y.scatter_add_(k, index, merged)
    return (y.unsqueeze(cax) if a.keepdims else y).to(out_dtype)


def slice_add_loop(a: ShiftSumArgs) -> torch.Tensor:
    """One slice-add per channel (the seed's method), differentiable by autograd."""
    y = forward_kernel(a.array, list(a.offsets), a.axis, a.channel_axis, a.mask)
    return y if a.keepdims else y.squeeze(a.channel_axis)


_EVERY = "; every autograd feature"
for _op, _summary, _strategies in (
    ("shift_sum", "slice-adds, NumPy on views or a Triton kernel" + _EVERY, FORWARD),
    ("shift_sum_adjoint", "one strided copy of all windows, or a Triton kernel" + _EVERY, ADJOINT),
    ("shift_sum_pinv", f"{_COMPOSED}; fused on CUDA", PINV),
):
    extend.register(
        _op,
        "torch",
        libraries=["torch"],
        priority=Priority.SPECIALIZED,
        summary=_summary,
        strategies=_strategies,
    )
extend.register(
    "shift_sum",
    "torch_scatter_add",
    libraries=["torch"],
    priority=Priority.BASELINE,
    summary="scatter_add_ with precomputed indices (alternative, for comparison)",
)(scatter_add)
extend.register(
    "shift_sum",
    "torch_slice_add_loop",
    libraries=["torch"],
    priority=Priority.BASELINE + 5,
    summary="one slice-add per channel, autograd through ATen (alternative)",
)(slice_add_loop)
