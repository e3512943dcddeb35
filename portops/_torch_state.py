"""What a torch call needs beyond its result, read from torch's own state (imports
torch); where torch has no public query the answer errs on the safe side.
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
_transforms_now: Any = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)
_COMPLEX = frozenset({torch.complex32, torch.complex64, torch.complex128})

if isinstance(getattr(forward_ad, "_current_level", None), int):

    def _dual_level_now(tensors: tuple[Any, ...]) -> bool:
        """Whether forward-mode AD may see this call: a dual level is open."""
        return bool(forward_ad._current_level >= 0)

else:

    def _dual_level_now(tensors: tuple[Any, ...]) -> bool:
        unpack: Any = forward_ad.unpack_dual
        return any(t is not None and unpack(t).tangent is not None for t in tensors)


def needs(tensors: tuple[Any, ...]) -> frozenset[str]:
    """The features (see :data:`portops._strategy.FEATURES`) a call on `tensors` needs."""
    found = {
        "compile": _is_compiling(),
        "functorch": _transforms_now(),
        "forward_ad": _dual_level_now(tensors),
        "grad": _grad_enabled() and any(t is not None and t.requires_grad for t in tensors),
    }
    return frozenset(name for name, needed in found.items() if needed)


def plan_state(tensors: tuple[Any, ...]) -> Hashable | None:
    """The ambient part of a plan key (grad mode), or None while tracing or transformed."""
    if _is_compiling() or _transforms_now() or _dual_level_now(tensors):
        return None
    return _grad_enabled()


def array_key(t: Any) -> Hashable:
    """A tensor's part of a plan key."""
    dtype = t.dtype
    lazy = dtype in _COMPLEX and (t.is_conj() or t.is_neg())
    return (dtype, t.shape, t.stride(), t.is_cpu or t.device, t.requires_grad, lazy)


def pair_key(params: Hashable, a: Any, b: Any) -> Hashable | None:
    """The plan key of a call on tensors `a` and `b` (or None), written out flat for
    the commonest call: :func:`plan_state` and :func:`array_key`'s parts, inlined."""
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
