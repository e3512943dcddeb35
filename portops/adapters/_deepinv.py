"""shift_sum as a DeepInverse ``LinearPhysics`` (torch tensors)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from .._ops.shift_sum import shift_sum, shift_sum_adjoint, shift_sum_pinv


@cache
def _physics_class() -> type:
    from deepinv.physics import LinearPhysics

    class ShiftSumPhysics(LinearPhysics):  # type: ignore[misc]  # deepinv has no stubs
        """CASSI dispersion ``y = shift_sum(x, step, mask=mask, keepdims=True)``."""

        def __init__(
            self, step: Any, channels: int, mask: Any, axis: int, channel_axis: int, **kwargs: Any
        ) -> None:
            super().__init__(**kwargs)
            self.step, self.channels = step, channels
            self.axis, self.channel_axis = axis, channel_axis
            self.mask = mask

        def _keywords(self, mask: Any) -> dict[str, Any]:
            if mask is not None:  # DeepInverse's convention: a mask given updates the physics
                self.mask = mask
            return {
                "axis": self.axis,
                "channel_axis": self.channel_axis,
                "mask": self.mask,
                "keepdims": True,
            }

        def A(self, x: Any, mask: Any = None, **kwargs: Any) -> Any:
            return shift_sum(x, self.step, **self._keywords(mask))

        def A_adjoint(self, y: Any, mask: Any = None, **kwargs: Any) -> Any:
            return shift_sum_adjoint(y, self.step, channels=self.channels, **self._keywords(mask))

        def A_dagger(self, y: Any, mask: Any = None, **kwargs: Any) -> Any:
            return shift_sum_pinv(y, self.step, channels=self.channels, **self._keywords(mask))

    return ShiftSumPhysics


def shift_sum_physics(
    step: int | Sequence[int],
    *,
    channels: int,
    mask: Any = None,
    axis: int = -1,
    channel_axis: int = -3,
    **kwargs: Any,
) -> Any:
    """:func:`portops.shift_sum` as a ``deepinv.physics.LinearPhysics``.

    ``A`` is the forward with the channel axis kept (``(B, C, H, W)`` to
    ``(B, 1, H, W')``), ``A_adjoint`` its exact adjoint and ``A_dagger`` the exact
    pseudo-inverse :func:`portops.shift_sum_pinv` (instead of DeepInverse's iterative
    least-squares default). Gradients flow through all three.

    Unlike ``deepinv.physics.CompressiveSpectralImaging``, the sum over channels is
    not divided by ``C``, the shift per channel is `step` pixels (any integer, or one
    offset per channel) and the shifted axis defaults to the width; see the
    "coming from DeepInverse" page for the exact correspondence.

    Parameters
    ----------
    step : int or sequence of int
        Shift per channel, or the offsets, as for :func:`portops.shift_sum`.
    channels : int
        Number of channels ``C`` of the images.
    mask : torch.Tensor, optional
        Coded aperture broadcasting against the images, for example ``(H, W)`` or
        ``(B, C, H, W)``. Passing ``mask=`` to ``A``, ``A_adjoint`` or ``A_dagger``
        replaces it, as DeepInverse's physics do.
    axis, channel_axis : int, optional
        As for :func:`portops.shift_sum`.
    **kwargs
        Passed to ``LinearPhysics`` (for example ``noise_model``).

    Returns
    -------
    deepinv.physics.LinearPhysics
    """
    return _physics_class()(step, channels, mask, axis, channel_axis, **kwargs)
