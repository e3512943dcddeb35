"""One masked linear operator pair ``A(m * x)`` / ``conj(m) * A^H y`` for every torch
feature (grad to any order, forward AD, ``torch.func``, ``torch.compile``, eager),
shared by shift_sum and shear so they all behave alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
from torch._functorch.utils import unwrap_dead_wrappers

__all__ = ["LinearPair", "result_dtype"]

Kernel = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]
Public = Callable[[torch.Tensor, "torch.Tensor | None", tuple[Any, ...]], torch.Tensor]


def result_dtype(a: torch.Tensor, mask: torch.Tensor | None) -> torch.dtype:
    """``result_type(a, mask)``."""
    return a.dtype if mask is None else torch.result_type(a, mask)


@dataclass(frozen=True)
class LinearPair:
    """A masked linear operator ``A(m * x)`` and its adjoint ``conj(m) * A^H y``: custom
    operators ``portops::<name>`` (`names`) of ``(Tensor x, <arguments>)`` and ``(Tensor y,
    <arguments>)``, run by ``kernel(adjoint, array, *arguments)``, and the result's shape
    and the public function (channel axis kept) of each, `adjoint` their first argument."""

    names: tuple[str, str]
    arguments: str
    kernel: Callable[..., torch.Tensor]
    shape: Callable[[bool, list[int], tuple[Any, ...]], list[int]]
    public: Callable[[bool, torch.Tensor, torch.Tensor | None, tuple[Any, ...]], torch.Tensor]
    axes: Sequence[int]
    ops: list[Any] = field(default_factory=list, init=False, compare=False)  # A, then A^H

    def __post_init__(self) -> None:
        """Define both custom operators, with their fake, autograd and vmap implementations."""
        for name, adjoint, array in zip(self.names, (False, True), "xy", strict=True):
            schema = f"(Tensor {array}, {self.arguments}) -> Tensor"
            kernel = partial(self.kernel, adjoint)
            op = torch.library.custom_op(f"portops::{name}", kernel, mutates_args=(), schema=schema)
            op.register_fake(partial(self._fake, adjoint))
            op.register_autograd(partial(self._op_backward, adjoint), setup_context=_setup)
            torch.library.register_vmap(op, partial(self._op_vmap, adjoint))
            self.ops.append(op)

    def gradients(
        self,
        adjoint: bool,
        saved: tuple[torch.Tensor | None, torch.Tensor | None],
        ctx: Any,
        needs: tuple[bool, bool],
        grad: torch.Tensor,
        ops: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Gradients in the array and the mask (`ops`: through the custom operators).

        ``out = A(m * x)``: ``grad_x = conj(m) * A^H g``, ``grad_m = conj(x) * A^H g``.
        ``out = conj(m) * A^H y``: ``grad_y = A(m * g)``, ``grad_m = conj(g) * A^H y``.
        """
        arr, mask = saved
        geometry, dtypes = ctx.geometry, ctx.dtypes
        forward: Public = partial(self.public, False)
        backward: Public = partial(self.public, True)
        if ops:
            fwd, adj = self.ops
            forward, backward = (lambda a, m, g: fwd(a, *g, m)), (lambda a, m, g: adj(a, *g, m))
        grad_arr = grad_mask = None
        if needs[0]:
            grad_arr = (forward if adjoint else backward)(grad, mask, geometry).to(dtypes[0])
        if mask is not None and needs[1]:
            assert arr is not None
            if adjoint:
                u = grad.conj() * backward(arr, None, geometry)
            else:
                u = backward(grad, None, geometry) * arr.conj()
            if u.shape != mask.shape:  # summed over the dims the mask was broadcast along
                u = u.sum_to_size(mask.shape)
            if not dtypes[1].is_complex and u.is_complex():
                u = u.real
            grad_mask = u.to(dtypes[1])
        return grad_arr, grad_mask

    def tangent(
        self, adjoint: bool, arr: torch.Tensor, mask: Any, geometry: Any, t_arr: Any, t_mask: Any
    ) -> torch.Tensor:
        """The tangent of the bilinear map at (arr, mask) along (t_arr, t_mask)."""
        public = partial(self.public, adjoint)
        out = None if t_arr is None else public(t_arr, mask, geometry)
        if t_mask is not None:
            term = public(arr, t_mask, geometry)  # A(t_m * x), or conj(t_m) * A^H y
            out = term if out is None else out + term
        if out is None:
            shape = self.shape(adjoint, list(arr.shape), geometry)
            out = arr.new_zeros(shape, dtype=result_dtype(arr, mask))
        return out

    def batched(
        self,
        adjoint: bool,
        in_dims: tuple[Any, ...],
        batch: int,
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
    ) -> tuple[torch.Tensor, int]:
        """The operator on inputs batched at ``in_dims[0]``/``[-1]``; batched at 0."""
        dim, mask_dim = in_dims[0], in_dims[-1]
        arr = arr.unsqueeze(0).expand(batch, *arr.shape) if dim is None else arr.movedim(dim, 0)
        if mask is not None:
            mask = mask.unsqueeze(0) if mask_dim is None else mask.movedim(mask_dim, 0)
        shifted = tuple(g + 1 if i in self.axes else g for i, g in enumerate(geometry))
        return self.public(adjoint, arr, mask, shifted), 0

    def _fake(self, adjoint: bool, arr: torch.Tensor, *rest: Any) -> torch.Tensor:
        *geometry, mask = rest
        shape = self.shape(adjoint, list(arr.shape), tuple(geometry))
        return arr.new_empty(shape, dtype=result_dtype(arr, mask))

    def _op_backward(self, adjoint: bool, ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[-1])
        grads = self.gradients(adjoint, ctx.saved_tensors, ctx, needs, grad, ops=True)
        return (grads[0], *(None,) * len(ctx.geometry), grads[1])

    def _op_vmap(
        self, adjoint: bool, info: Any, in_dims: tuple[Any, ...], arr: torch.Tensor, *rest: Any
    ) -> tuple[torch.Tensor, int]:
        *geometry, mask = rest
        return self.batched(adjoint, in_dims, info.batch_size, arr, mask, tuple(geometry))

    def apply(
        self,
        adjoint: bool,
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
        kernel: Kernel,
    ) -> torch.Tensor:
        """The operator through autograd: `kernel` computes, the public functions differentiate."""
        # Outside torch.func, Function.apply's own path less its binding of the arguments to
        # forward's signature (three positional, no defaults): ~10 µs of host time a call.
        apply: Any = _Linear.apply if torch._C._are_functorch_transforms_active() else _direct
        return cast("torch.Tensor", apply(arr, mask, (self, adjoint, geometry, kernel)))

    def call_op(
        self, adjoint: bool, arr: torch.Tensor, mask: torch.Tensor | None, geometry: Any
    ) -> torch.Tensor:
        """The custom operator (what ``torch.compile`` traces)."""
        op = self.ops[1 if adjoint else 0]  # (torch 2.11 traces no bool index)
        return cast("torch.Tensor", op(arr, *geometry, mask))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """The custom operators' autograd context: geometry, dtypes, what the backward needs."""
    arr, *geometry, mask = inputs
    ctx.geometry = tuple(geometry)
    ctx.dtypes = (arr.dtype, None if mask is None else mask.dtype)
    ctx.save_for_backward(arr if mask is not None else None, mask)


class _Linear(torch.autograd.Function):
    """A pair's operator in eager mode: `kernel` forward, the pair's derivative rules."""

    # `spec`: (pair, adjoint, geometry, kernel), one argument (torch binds each per call).
    @staticmethod
    def forward(arr: torch.Tensor, mask: Any, spec: tuple[Any, ...]) -> torch.Tensor:
        return cast("torch.Tensor", spec[3](arr, mask))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        arr, mask, (pair, adjoint, geometry, _) = inputs
        _setup(ctx, (arr, *geometry, mask), output)
        ctx.pair, ctx.adjoint = pair, adjoint
        ctx.save_for_forward(arr, mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return (*ctx.pair.gradients(ctx.adjoint, ctx.saved_tensors, ctx, needs, grad), None)

    @staticmethod
    def jvp(ctx: Any, t_arr: Any, t_mask: Any, *unused: Any) -> torch.Tensor:
        arr, mask = ctx.saved_tensors
        out: torch.Tensor = ctx.pair.tangent(ctx.adjoint, arr, mask, ctx.geometry, t_arr, t_mask)
        return out

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], arr: Any, mask: Any, spec: Any) -> Any:
        pair, adjoint, geometry, _ = spec
        return pair.batched(adjoint, in_dims[:2], info.batch_size, arr, mask, geometry)


# Under torch.func, Function.apply binds arguments to forward's signature: computed once.
_Linear.forward.__signature__ = inspect.signature(_Linear.forward)  # type: ignore[attr-defined]
_base_apply: Any = super(torch.autograd.Function, _Linear).apply
_direct = lambda *args: _base_apply(*unwrap_dead_wrappers(args))  # noqa: E731
