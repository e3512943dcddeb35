"""A reusable CASSI dispersion operator that keeps its ``Phi``.

:class:`Dispersion` binds the arguments of the shift_sum family (step, channels, mask,
axes) once. Its ``pinv`` divides by ``Phi = A(|mask|^2)`` computed on first use for
each (library, device, dtype, width) and kept, so an iterative solver that calls it
hundreds of times with the same mask pays for ``Phi`` once: a pinv then costs an
adjoint plus one multiply over the (small) measurement. The functional API
(:func:`portops.shift_sum_pinv` and the rest) is unchanged and recomputes ``Phi`` on
every call.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
from collections.abc import Sequence
from typing import Any

from . import _validate as check
from ._arrays import inspect_arrays, inspect_operands
from ._dtypes import accumulation_dtype
from ._generic import shift_sum as generic
from ._ops.shear import dispersion_offsets, growth, shear, unshear
from ._ops.shift_sum import ShiftSumArgs, _normalize_mask, _x_width, shift_sum, shift_sum_adjoint

__all__ = ["Dispersion"]
_KEPT_LOCK = threading.Lock()  # guards every operator's kept Phi: making one makes no lock


def _traced(a: Any) -> bool:
    """Whether `a` only exists inside a trace (JAX tracer, torch.compile), so not kept."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(a, jax.core.Tracer):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return bool(torch.compiler.is_compiling() or a.requires_grad)
    return False


class Dispersion:
    """The CASSI dispersion operator ``A`` with its step, channels and mask bound.

    ``A(x) = scale * shift_sum(x, step, mask=mask)``: channel ``c`` masked, shifted
    by ``o_c`` along `axis` and summed. Methods take the arrays only; results keep
    the library, device and dtype of their input, as the functional API's do.

    Parameters
    ----------
    step : int, float, or sequence of them
        Shift per channel, or the ``C`` offsets. A fractional step (DeepInverse's
        ``shear_factor=0.5`` is ``step=0.5``) shifts by linear interpolation; then
        ``A A^H`` is no longer diagonal and :meth:`pinv` is not available.
    channels : int
        Number of channels ``C``.
    mask : array, optional
        Coded aperture; broadcasts against ``x``. Kept as given (not copied): do not
        modify it in place after the first :meth:`pinv`, which keeps ``Phi``.
    axis, channel_axis : int, optional
        As for :func:`portops.shift_sum`, in the layout of ``x``.
    x_shape : tuple of int, optional
        Shape of ``x``; needed only for :attr:`shape`, :attr:`x_shape` and
        :attr:`y_shape` (what matrix-free solver adapters ask for).
    scale : float, optional
        Factor on the forward operator (its adjoint gets the conjugate, :meth:`pinv`
        the inverse). Recipes: MST's simulation scales the measurement by ``2 / C``
        (``scale=2 / 28``), its real data by ``2 / C * 1.2``; DeepInverse's
        ``CompressiveSpectralImaging`` by ``1 / C``.

    Notes
    -----
    :meth:`pinv` gives 0 where ``Phi == 0`` (measurement pixels no open mask
    position reaches); BIRNAT's ``y / Phi`` has no such guard and gives NaN or inf
    there. DeepInverse 0.5.0 shifts its operator by one pixel when a padded dimension
    is even, so its ``A`` and ``A_adjoint`` are not adjoint there (a dot test misses
    by 4e-4 to 5e-3): compare with it on odd padded sizes.

    Examples
    --------
    >>> import numpy as np, portops
    >>> mask = (np.random.default_rng(0).random((8, 8)) > 0.5).astype(np.float32)
    >>> A = portops.Dispersion(2, 4, mask=mask)
    >>> x = np.random.default_rng(1).random((2, 4, 8, 8), dtype=np.float32)
    >>> y = A(x)                                  # (2, 8, 14)
    >>> bool(np.allclose(A(A.pinv(y)), y, atol=1e-5))
    True
    """

    def __init__(
        self,
        step: float | Sequence[float],
        channels: int,
        *,
        mask: Any = None,
        axis: int = -1,
        channel_axis: int = -3,
        x_shape: Sequence[int] | None = None,
        scale: float = 1.0,
    ) -> None:
        self.channels = check.positive_int(channels, "channels")
        self._whole, self._fractions = dispersion_offsets(step, self.channels)
        self.mask = mask
        if mask is not None:
            inspect_arrays(("mask",), (mask,))
        self.axis = check.integer(axis, "axis")
        self.channel_axis = check.integer(channel_axis, "channel_axis")
        if self.axis == self.channel_axis:
            raise ValueError(f"axis={axis} and channel_axis={channel_axis} name the same axis")
        self._x_shape = None if x_shape is None else check.dims(x_shape, "x_shape")
        if self._x_shape is not None:
            _, cax = check.axis_pair(axis, channel_axis, len(self._x_shape))
            if self._x_shape[cax] != self.channels:
                raise ValueError(
                    f"x_shape has {self._x_shape[cax]} channels along channel_axis="
                    f"{channel_axis}, not {self.channels}"
                )
        if not isinstance(scale, numbers.Number) and getattr(scale, "ndim", None) != 0:
            raise TypeError(f"scale must be a number, got {type(scale).__name__}")
        self.scale = scale
        self._kept: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    # ------------------------------------------------------------------ facts

    @property
    def offsets(self) -> tuple[float, ...] | tuple[int, ...]:
        """The normalised offsets ``o_c`` (``min == 0``); floats when fractional."""
        if self._fractions is None:
            return self._whole
        return tuple(n + f for n, f in zip(self._whole, self._fractions, strict=True))

    @property
    def fractional(self) -> bool:
        """Whether some offset falls between pixels (linear interpolation)."""
        return self._fractions is not None

    @property
    def grow(self) -> int:
        """How much the shifted axis lengthens: ``ceil(max(o))``."""
        return growth(self._whole, self._fractions)

    @property
    def x_shape(self) -> tuple[int, ...]:
        """Shape of ``x`` (given at construction)."""
        if self._x_shape is None:
            raise ValueError("this Dispersion was made without x_shape")
        return self._x_shape

    @property
    def y_shape(self) -> tuple[int, ...]:
        """Shape of the measurement ``A(x)`` (channel axis dropped)."""
        shape = list(self.x_shape)
        ax, cax = check.axis_pair(self.axis, self.channel_axis, len(shape))
        shape[ax] += self.grow
        del shape[cax]
        return tuple(shape)

    @property
    def shape(self) -> tuple[int, int]:
        """``(y.size, x.size)``: the shape of ``A`` as a matrix."""
        return (math.prod(self.y_shape), math.prod(self.x_shape))

    @property
    def dtype(self) -> Any:
        """The mask's dtype (``None`` without a mask): results promote with it."""
        return None if self.mask is None else self.mask.dtype

    def __repr__(self) -> str:
        mask = "None" if self.mask is None else f"<{tuple(self.mask.shape)} {self.mask.dtype}>"
        return (
            f"Dispersion(offsets={list(self.offsets)}, channels={self.channels}, mask={mask}, "
            f"axis={self.axis}, channel_axis={self.channel_axis}, scale={self.scale})"
        )

    # ------------------------------------------------------------------ operators

    def _kw(self, **more: Any) -> dict[str, Any]:
        return {"axis": self.axis, "channel_axis": self.channel_axis, "mask": self.mask, **more}

    def _scaled(self, a: Any, factor: Any) -> Any:
        return a if isinstance(factor, numbers.Complex) and factor == 1 else a * factor

    def _check_channels(self, a: Any, name: str) -> None:
        """Name `channels` where `a` has another count (the operation would blame `step`)."""
        ndim = getattr(a, "ndim", None)  # (else the operation says what is wrong)
        if ndim is not None and -ndim <= self.channel_axis < ndim:
            if (n := a.shape[self.channel_axis]) != self.channels:
                raise ValueError(
                    f"{name} has {n} channels along channel_axis={self.channel_axis}, but "
                    f"this Dispersion was made with channels={self.channels}"
                )

    def forward(self, x: Any, *, keepdims: bool = False) -> Any:
        """``A(x)``: mask, shift, sum over channels (times `scale`)."""
        self._check_channels(x, "x")
        if self._fractions is None:
            y = shift_sum(x, self._whole, **self._kw(keepdims=keepdims))
        else:
            sheared = self.shear(x)
            cax = check.axis(self.channel_axis, x.ndim, "channel_axis")
            xp = inspect_arrays(("x",), (x,)).xp
            dtype = sheared.dtype
            acc = accumulation_dtype(xp, dtype)  # half precision summed in float32
            y = xp.sum(sheared, axis=cax, keepdims=keepdims, dtype=acc)
            y = y if acc == dtype else xp.astype(y, dtype)
        return self._scaled(y, self.scale)

    __call__ = forward

    def adjoint(self, y: Any, *, keepdims: bool = False) -> Any:
        """``A^H(y)``: each channel's window of ``y``, times the conjugated mask."""
        scale = self.scale.conj() if hasattr(self.scale, "conj") else self.scale.conjugate()
        if self._fractions is None:
            x = shift_sum_adjoint(
                y, self._whole, **self._kw(channels=self.channels, keepdims=keepdims)
            )
        else:
            xp = inspect_arrays(("y",), (y,)).xp
            ndim = y.ndim if keepdims else y.ndim + 1
            cax = check.axis(self.channel_axis, ndim, "channel_axis")
            y1 = y if keepdims else xp.expand_dims(y, axis=cax)
            shape = (*y1.shape[:cax], self.channels, *y1.shape[cax + 1 :])
            x = self.unshear(xp.broadcast_to(y1, shape))
        return self._scaled(x, scale)

    def shear(self, x: Any) -> Any:
        """The sheared cube of ``mask * x``, channels kept (see :func:`portops.shear`)."""
        self._check_channels(x, "x")
        return shear(x, list(self.offsets), **self._kw())

    def unshear(self, y: Any) -> Any:
        """Each channel's window of a sheared cube, times the conjugated mask."""
        self._check_channels(y, "y")
        return unshear(y, list(self.offsets), **self._kw())

    def phi(self, y: Any, *, keepdims: bool = False) -> Any:
        """``Phi = sum_c shift_c(|mask_c|^2)`` for measurements like `y` (kept).

        Shaped to broadcast against `y` (with `keepdims`, against ``y`` keeping the
        channel axis), real, in `y`'s precision promoted with the mask's.
        """
        phi, _ = self._phi_and_inverse(y, keepdims)
        return phi if keepdims else self._drop_channel_axis(phi, y)

    def _drop_channel_axis(self, phi: Any, y: Any) -> Any:
        cax = check.axis(self.channel_axis, y.ndim + 1, "channel_axis")
        return inspect_arrays(("y",), (y,)).xp.squeeze(phi, axis=cax)

    def _phi_and_inverse(self, y: Any, keepdims: bool) -> tuple[Any, Any]:
        """``Phi`` and ``1 / Phi`` (0 where ``Phi == 0``), channel axis kept; cached."""
        if self._fractions is not None:
            raise ValueError(
                "Phi and pinv need integer offsets: with a fractional step A A^H is not "
                "diagonal; use an iterative solver with forward/adjoint"
            )
        lib, (y, mask) = inspect_operands(("y", "mask"), (y, self.mask))
        xp = lib.xp
        ndim = y.ndim if keepdims else y.ndim + 1
        ax = check.axis(self.axis, ndim, "axis")
        cax = check.axis(self.channel_axis, ndim, "channel_axis")
        is_complex = xp.isdtype(y.dtype, "complex floating")
        real = xp.real(xp.empty((), dtype=y.dtype)).dtype if is_complex else y.dtype
        length = y.shape[ax] if keepdims else y.shape[ax - (ax > cax)]
        width = _x_width(length, self.axis, self.channels, self.grow)
        key = (lib.library, str(getattr(y, "device", lib.device)), str(real), width, ndim)
        kept = self._kept.get(key)
        if kept is not None:  # (y's other dimensions must still take the mask's, as below)
            shape = y.shape if keepdims else (*y.shape[:cax], 1, *y.shape[cax:])
            if any(p not in (1, n) for p, n in zip(kept[0].shape, shape, strict=True)):
                raise ValueError(f"mask of shape {self.mask.shape} does not broadcast against y")
            return kept
        y1 = y if keepdims else xp.expand_dims(y, axis=cax)
        a = ShiftSumArgs.make("adjoint", y1, self._whole, ax, cax, None, True, xp)
        if mask is not None:
            a = a._replace(mask=_normalize_mask(xp, mask, a.shape, real))
        phi = generic.overlap(a, _public_forward)
        inverse = generic.divide_where_positive(xp, xp.ones_like(phi), phi)
        if not _traced(phi):  # Phi comes from the mask alone
            with _KEPT_LOCK:
                self._kept[key] = (phi, inverse)
        return phi, inverse

    def pinv(self, y: Any, *, keepdims: bool = False) -> Any:
        """The Moore-Penrose pseudo-inverse ``A^H(y / Phi)`` with the kept ``Phi``.

        Exact (``A(pinv(y)) == y`` on the range of ``A``) and finite where ``Phi == 0``.
        The first call for a (library, device, dtype, width) computes ``Phi``; later
        ones cost an adjoint and one multiply over `y`.
        """
        xp = inspect_arrays(("y",), (y,)).xp
        check.check_dtype(xp, y, "y", floating_only=True)
        _, inverse = self._phi_and_inverse(y, keepdims)
        z = y * (inverse if keepdims else self._drop_channel_axis(inverse, y))
        if self.mask is None:
            z = xp.astype(z, y.dtype, copy=False)
        x = shift_sum_adjoint(z, self._whole, **self._kw(channels=self.channels, keepdims=keepdims))
        zero = isinstance(self.scale, numbers.Complex) and self.scale == 0  # (arrays: traced?)
        return self._scaled(x, 0 if zero else 1 / self.scale)  # the zero operator's is zero


def _public_forward(a: ShiftSumArgs) -> Any:
    return shift_sum(a.array, a.offsets, axis=a.axis, channel_axis=a.channel_axis, keepdims=True)
