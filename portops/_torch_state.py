"""What a torch call needs beyond its result, read from torch's own state.

Imported only once a tensor has been passed (it imports torch). Every torch backend
module asks here which features a call needs (:func:`needs`), and the plan keys read
:func:`plan_state` and :func:`array_key`, so the answer is the same everywhere.

Two of torch's switches have no public query: whether a ``torch.func`` transform
(``vmap``, ``grad``, ``jvp``, ...) is active, and whether a forward-mode AD level is
open. Both are read through torch's own functions where present (what
``torch.autograd.Function.apply`` itself calls); where a torch lacks them the answer
errs on the safe side: a transform is assumed active (the call takes a strategy that
keeps every feature), and dual tensors are found one by one with the public
``forward_ad.unpack_dual``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from torch.autograd import forward_ad

from ._plans import ambient  # (imported by portops._plans, once a tensor is seen)

__all__ = ["array_key", "needs", "pair_key", "plan_state"]

Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
# Capability checks: private functions of torch with a public (or safe) fallback.
_transforms_active: Any = getattr(torch._C, "_are_functorch_transforms_active", None)
_HAS_LEVEL = isinstance(getattr(forward_ad, "_current_level", None), int)
_COMPLEX = frozenset({torch.complex32, torch.complex64, torch.complex128})


def functorch_active() -> bool:
    """Whether a ``torch.func`` transform is active (True where torch cannot say)."""
    if _transforms_active is None:
        return True
    return bool(_transforms_active())


def forward_ad_active(tensors: tuple[Any, ...]) -> bool:
    """Whether forward-mode AD may see this call: a dual level is open (or, where that
    cannot be read, one of `tensors` carries a tangent)."""
    if _HAS_LEVEL:
        return bool(forward_ad._current_level >= 0)
    return any(t is not None and forward_ad.unpack_dual(t).tangent is not None for t in tensors)


def needs(tensors: tuple[Any, ...]) -> frozenset[str]:
    """The features (see :data:`portops._strategy.FEATURES`) a call on `tensors` needs."""
    found = []
    if _is_compiling():
        found.append("compile")
    if functorch_active():
        found.append("functorch")
    if forward_ad_active(tensors):
        found.append("forward_ad")
    if _grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        found.append("grad")
    return frozenset(found)


def plan_state(tensors: tuple[Any, ...]) -> Hashable | None:
    """The ambient part of a plan key: whether gradients are recorded; None (no plan)
    while torch.compile traces, a torch.func transform is active or forward-mode AD
    is open. (``requires_grad`` itself is in each tensor's part.)"""
    if _is_compiling() or functorch_active() or forward_ad_active(tensors):
        return None
    return _grad_enabled()


def array_key(t: Any) -> Hashable:
    """A tensor's part of a plan key."""
    dtype = t.dtype
    lazy = dtype in _COMPLEX and (t.is_conj() or t.is_neg())
    return (dtype, t.shape, t.stride(), t.is_cpu or t.device, t.requires_grad, lazy)


def pair_key(params: Hashable, a: Any, b: Any) -> Hashable | None:
    """The plan key of a call on tensors `a` and `b` (or None), written out, flat: the
    commonest call, whose overhead is mostly this (each read costs about 0.1 us).
    The same state as :func:`plan_state` and the same parts as :func:`array_key`."""
    if _is_compiling() or _transforms_now() or _dual_level_now((a, b)):
        return None
    da, ga = a.dtype, a.requires_grad
    lazy = da in _COMPLEX and (a.is_conj() or a.is_neg())
    if b is None:
        return (
            params, ambient(), da, a.shape, a.stride(), a.is_cpu or a.device, ga, lazy,
            ga and _grad_enabled(),
        )  # fmt: skip
    db, gb = b.dtype, b.requires_grad
    lazy = lazy or (db in _COMPLEX and (b.is_conj() or b.is_neg()))
    return (
        params, ambient(), da, a.shape, a.stride(), a.is_cpu or a.device, ga,
        db, b.shape, b.stride(), b.is_cpu or b.device, gb, lazy,
        (ga or gb) and _grad_enabled(),
    )  # fmt: skip


def _level_open(tensors: tuple[Any, ...]) -> bool:
    return bool(forward_ad._current_level >= 0)


# The two checks of every tensor call, bound once to what this torch offers.
_transforms_now: Any = _transforms_active if _transforms_active is not None else lambda: True
_dual_level_now: Any = _level_open if _HAS_LEVEL else forward_ad_active
