"""Plain-loop references for the shift_sum family (NumPy, one element at a time)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def offsets_of(step: int | Sequence[int], channels: int) -> list[int]:
    """The normalised offsets ``o_c`` (min 0)."""
    offs = [c * step for c in range(channels)] if isinstance(step, int) else list(step)
    low = min(offs)
    return [o - low for o in offs]


def forward(x, step, *, axis=-1, channel_axis=-3, mask=None, keepdims=False):
    """``y[..., w + o_c] += (mask * x)[..., c, ..., w]`` element by element."""
    x = np.asarray(x)
    z = x if mask is None else x * np.asarray(mask)
    z = np.broadcast_to(z, np.broadcast_shapes(z.shape, x.shape))
    ax, cax = axis % x.ndim, channel_axis % x.ndim
    offs = offsets_of(step, x.shape[cax])
    shape = list(x.shape)
    shape[ax] += max(offs)
    shape[cax] = 1
    y = np.zeros(shape, dtype=np.result_type(z.dtype, np.float64 if z.dtype.kind == "f" else z))
    for idx in itertools.product(*(range(n) for n in x.shape)):
        out = list(idx)
        out[ax] += offs[idx[cax]]
        out[cax] = 0
        y[tuple(out)] += z[idx]
    return y if keepdims else np.squeeze(y, axis=cax)


def adjoint(y, step, *, channels=None, axis=-1, channel_axis=-3, mask=None, keepdims=False):
    """``x[..., c, ..., w] = conj(mask) * y[..., w + o_c]`` element by element."""
    y = np.asarray(y)
    ndim = y.ndim if keepdims else y.ndim + 1
    ax, cax = axis % ndim, channel_axis % ndim
    if not keepdims:
        y = np.expand_dims(y, cax)
    offs = offsets_of(step, channels if isinstance(step, int) else len(step))
    shape = list(y.shape)
    shape[ax] -= max(offs)
    shape[cax] = len(offs)
    x = np.zeros(shape, dtype=y.dtype)
    for idx in itertools.product(*(range(n) for n in shape)):
        src = list(idx)
        src[ax] += offs[idx[cax]]
        src[cax] = 0
        x[idx] = y[tuple(src)]
    if mask is not None:
        x = x * np.conj(np.asarray(mask))
    return x


def dense_matrix(x_shape, step, *, axis=-1, channel_axis=-3, mask=None):
    """The operator as a dense matrix (columns: A applied to unit vectors)."""
    n = int(np.prod(x_shape))
    cols = []
    for i in range(n):
        e = np.zeros(n)
        e[i] = 1
        cols.append(
            forward(
                e.reshape(x_shape), step, axis=axis, channel_axis=channel_axis, mask=mask
            ).reshape(-1)
        )
    return np.stack(cols, axis=1)


# Small cases for gradient checks: a mask over (H, W), irregular offsets, channels-last.
GRADIENT_CASES = [
    ((2, 3, 4, 5), 2, -1, -3, (4, 5)),
    ((3, 4, 2), [0, 2, 1], -1, 0, (3, 1, 2)),
    ((2, 4, 3, 2), 1, -2, -1, (2, 4, 3, 1)),
]


def check_gradients(torch, shape, step, axis, cax, mask_shape, dtype, device):
    """gradcheck of forward, adjoint and pinv in x/y and mask, gradgradcheck of forward."""
    import portops

    opts = {"dtype": getattr(torch, dtype), "device": device, "requires_grad": True}
    kw = {"axis": axis, "channel_axis": cax}
    channels = shape[cax]
    x = torch.randn(shape, **opts)
    mask = torch.randn(mask_shape, **opts)
    y = torch.randn(forward(np.zeros(shape), step, **kw).shape, **opts)

    def fwd(x, m):
        return portops.shift_sum(x, step, **kw, mask=m)

    def adj(y, m):
        return portops.shift_sum_adjoint(y, step, channels=channels, **kw, mask=m)

    def pinv(y, m):
        return portops.shift_sum_pinv(y, step, channels=channels, **kw, mask=m)

    assert torch.autograd.gradcheck(fwd, (x, mask))
    assert torch.autograd.gradcheck(adj, (y, mask))
    assert torch.autograd.gradgradcheck(fwd, (x, mask))
    # pinv through |mask|^2: keep the mask away from zero so Phi stays smooth.
    m_pos = (mask.detach().abs() + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(pinv, (y, m_pos))
    m_const = m_pos.detach()  # without a mask gradient (a fused op on CUDA)
    assert torch.autograd.gradcheck(lambda t: pinv(t, m_const), (y,))
