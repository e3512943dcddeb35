"""One definition of a masked linear operator pair for every torch feature.

The shift_sum family and shear / unshear are each a pair of operators, ``A(m * x)``
and its adjoint ``conj(m) * A^H y``, bilinear in the array and the mask. Each pair is
defined here once, so that every feature behaves the same for all of them, at every
size:

- gradients to any order: the backward of one operator calls the other, through the
  public functions (which keep these features themselves);
- forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``): the tangent of a
  bilinear map, by the same operators;
- the ``torch.func`` transforms (``grad``, ``vmap``, ``jacrev``, ...): an
  ``autograd.Function`` with ``setup_context``, a ``jvp`` and a ``vmap`` rule (a batch
  dimension moved in front, the axes moved one to the right);
- ``torch.compile``: ``torch.library`` custom operators with fake implementations, the
  same autograd formula and the same vmap rule;
- plain eager calls: the kernel itself, without the Function's cost.

A pair is built from its two custom operators (``op(array, *geometry, mask)``, the
channel axis kept in both layouts), their output shapes, the public functions, and
which geometry entries are axes. The kernels a call runs come from the strategies of
the operator's module (:func:`run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LinearPair", "result_dtype"]

Kernel = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]
Public = Callable[[torch.Tensor, "torch.Tensor | None", tuple[Any, ...]], torch.Tensor]


def result_dtype(a: torch.Tensor, mask: torch.Tensor | None) -> torch.dtype:
    """``result_type(a, mask)``."""
    return a.dtype if mask is None else torch.result_type(a, mask)


def _reduce_to(grad: torch.Tensor, like_shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A gradient summed over the dims its input was broadcast along, in its dtype."""
    if grad.shape != like_shape:
        grad = grad.sum_to_size(like_shape)
    if not dtype.is_complex and grad.is_complex():
        grad = grad.real
    return grad.to(dtype)


@dataclass(frozen=True)
class LinearPair:
    """A masked linear operator ``A(m * x)`` and its adjoint ``conj(m) * A^H y``.

    Parameters
    ----------
    forward_op, adjoint_op
        The ``torch.library`` custom operators, ``op(array, *geometry, mask)``.
    forward_shape, adjoint_shape
        ``(input shape, geometry) -> output shape`` of each (channel axis kept).
    public_forward, public_adjoint
        ``(array, mask, geometry) -> result``: the public functions with the channel
        axis kept, used by the backward, the tangent and the vmap rule.
    axes
        Positions in the geometry that are (non-negative) axes.
    """

    forward_op: Any
    adjoint_op: Any
    forward_shape: Callable[[list[int], tuple[Any, ...]], list[int]]
    adjoint_shape: Callable[[list[int], tuple[Any, ...]], list[int]]
    public_forward: Public
    public_adjoint: Public
    axes: Sequence[int]

    def register(self) -> None:
        """Give both custom operators their fake, autograd and vmap implementations."""
        for op, adjoint in ((self.forward_op, False), (self.adjoint_op, True)):
            op.register_fake(self._fake(adjoint))
            op.register_autograd(self._op_backward(adjoint), setup_context=self._op_setup)
            torch.library.register_vmap(op, self._op_vmap(adjoint))

    # -- the pieces shared by the custom operators and the autograd.Function -------------

    def _calls(self, ops: bool) -> tuple[Public, Public]:
        """(forward, adjoint): the public functions, or the custom operators (what the
        operators' own backward calls, so that torch.compile traces nothing else)."""
        if not ops:
            return self.public_forward, self.public_adjoint
        fwd, adj = self.forward_op, self.adjoint_op
        return (lambda a, m, g: fwd(a, *g, m)), (lambda a, m, g: adj(a, *g, m))

    def gradients(
        self,
        adjoint: bool,
        arr: torch.Tensor | None,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
        dtypes: tuple[torch.dtype, torch.dtype | None],
        needs: tuple[bool, bool],
        grad: torch.Tensor,
        ops: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Gradients in the array and the mask (`ops`: by the custom operators).

        ``out = A(m * x)``: ``grad_x = conj(m) * A^H g``, ``grad_m = conj(x) * A^H g``.
        ``out = conj(m) * A^H y``: ``grad_y = A(m * g)``, ``grad_m = conj(g) * A^H y``.
        """
        forward, backward = self._calls(ops)
        grad_arr = grad_mask = None
        if needs[0]:
            back = forward if adjoint else backward
            grad_arr = back(grad, mask, geometry).to(dtypes[0])
        if mask is not None and needs[1]:
            assert arr is not None and dtypes[1] is not None
            if adjoint:
                u = grad.conj() * backward(arr, None, geometry)
            else:
                u = backward(grad, None, geometry) * arr.conj()
            grad_mask = _reduce_to(u, mask.shape, dtypes[1])
        return grad_arr, grad_mask

    def tangent(
        self,
        adjoint: bool,
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
        t_arr: torch.Tensor | None,
        t_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The tangent of the bilinear map at (arr, mask) along (t_arr, t_mask)."""
        public = self.public_adjoint if adjoint else self.public_forward
        out = None
        if t_arr is not None:
            out = public(t_arr, mask, geometry)
        if t_mask is not None:
            term = public(arr, t_mask, geometry)  # A(t_m * x), or conj(t_m) * A^H y
            out = term if out is None else out + term
        if out is None:
            shape = (self.adjoint_shape if adjoint else self.forward_shape)(
                list(arr.shape), geometry
            )
            out = arr.new_zeros(shape, dtype=result_dtype(arr, mask))
        return out

    def batched(
        self,
        adjoint: bool,
        in_dims: tuple[int | None, int | None],
        batch: int,
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
    ) -> torch.Tensor:
        """The operator on inputs with a batch dimension (at `in_dims`): the batch moved
        to the front of both, the axes one to the right; the result batched at 0."""
        arr_dim, mask_dim = in_dims
        arr = (
            arr.unsqueeze(0).expand(batch, *arr.shape)
            if arr_dim is None
            else arr.movedim(arr_dim, 0)
        )
        if mask is not None:
            mask = mask.unsqueeze(0) if mask_dim is None else mask.movedim(mask_dim, 0)
        shifted = tuple(g + 1 if i in self.axes else g for i, g in enumerate(geometry))
        public = self.public_adjoint if adjoint else self.public_forward
        return public(arr, mask, shifted)

    # -- the custom operators' registrations -----------------------------------------

    def _fake(self, adjoint: bool) -> Callable[..., torch.Tensor]:
        shape_of = self.adjoint_shape if adjoint else self.forward_shape

        def fake(arr: torch.Tensor, *rest: Any) -> torch.Tensor:
            *geometry, mask = rest
            shape = shape_of(list(arr.shape), tuple(geometry))
            return arr.new_empty(shape, dtype=result_dtype(arr, mask))

        return fake

    @staticmethod
    def _op_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        arr, *geometry, mask = inputs
        ctx.geometry = tuple(geometry)
        ctx.dtypes = (arr.dtype, None if mask is None else mask.dtype)
        ctx.save_for_backward(arr if mask is not None else None, mask)

    def _op_backward(self, adjoint: bool) -> Callable[..., tuple[Any, ...]]:
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
            arr, mask = ctx.saved_tensors
            needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[-1])
            geometry, dtypes = ctx.geometry, ctx.dtypes
            grads = self.gradients(adjoint, arr, mask, geometry, dtypes, needs, grad, ops=True)
            return (grads[0], *(None,) * len(ctx.geometry), grads[1])

        return backward

    def _op_vmap(self, adjoint: bool) -> Callable[..., tuple[torch.Tensor, int]]:
        def vmap(info: Any, in_dims: tuple[Any, ...], arr: torch.Tensor, *rest: Any) -> Any:
            *geometry, mask = rest
            dims = (in_dims[0], in_dims[-1])
            out = self.batched(adjoint, dims, info.batch_size, arr, mask, tuple(geometry))
            return out, 0

        return vmap

    # -- eager calls ---------------------------------------------------------------------

    def apply(
        self,
        adjoint: bool,
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        geometry: tuple[Any, ...],
        kernel: Kernel,
    ) -> torch.Tensor:
        """The operator on normalised inputs through autograd: `kernel` computes the
        result; gradients, tangents and batching go through the public functions."""
        out: torch.Tensor = _Linear.apply(arr, mask, self, adjoint, geometry, kernel)
        return out

    def call_op(
        self, adjoint: bool, arr: torch.Tensor, mask: torch.Tensor | None, geometry: Any
    ) -> torch.Tensor:
        """The custom operator (what ``torch.compile`` traces)."""
        op = self.adjoint_op if adjoint else self.forward_op
        out: torch.Tensor = op(arr, *geometry, mask)
        return out


class _Linear(torch.autograd.Function):
    """A pair's operator in eager mode: `kernel` forward, the pair's formulas for the
    backward, the tangent and the vmap rule."""

    @staticmethod
    def forward(
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        pair: LinearPair,
        adjoint: bool,
        geometry: tuple[Any, ...],
        kernel: Kernel,
    ) -> torch.Tensor:
        return kernel(arr, mask)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        arr, mask, pair, adjoint, geometry, _ = inputs
        ctx.pair, ctx.adjoint, ctx.geometry = pair, adjoint, geometry
        ctx.dtypes = (arr.dtype, None if mask is None else mask.dtype)
        ctx.save_for_backward(arr if mask is not None else None, mask)
        ctx.save_for_forward(arr, mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        arr, mask = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        pair: LinearPair = ctx.pair
        grads = pair.gradients(ctx.adjoint, arr, mask, ctx.geometry, ctx.dtypes, needs, grad)
        return (*grads, None, None, None, None)

    @staticmethod
    def jvp(ctx: Any, t_arr: Any, t_mask: Any, *unused: Any) -> torch.Tensor:
        arr, mask = ctx.saved_tensors
        pair: LinearPair = ctx.pair
        return pair.tangent(ctx.adjoint, arr, mask, ctx.geometry, t_arr, t_mask)

    @staticmethod
    def vmap(
        info: Any,
        in_dims: tuple[Any, ...],
        arr: torch.Tensor,
        mask: torch.Tensor | None,
        pair: LinearPair,
        adjoint: bool,
        geometry: tuple[Any, ...],
        kernel: Kernel,
    ) -> tuple[torch.Tensor, int]:
        dims = (in_dims[0], in_dims[1])
        return pair.batched(adjoint, dims, info.batch_size, arr, mask, geometry), 0
