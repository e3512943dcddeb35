"""Plain-loop references for shear / unshear, and the published CASSI definitions.

The CASSI functions are written from their published definitions (NumPy instead of
torch, no ``.cuda()``), each named by the project and function it comes from.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def offsets_of(step, channels):
    """Real offsets ``o_c`` shifted so that ``min(o) == 0``."""
    offs = [c * step for c in range(channels)] if np.isscalar(step) else list(step)
    low = min(offs)
    return [o - low for o in offs]


def _weights(o):
    """(position, weight) pairs of a shift by `o` with linear interpolation."""
    n = math.floor(o)
    f = o - n
    return [(n, 1.0)] if f == 0 else [(n, 1 - f), (n + 1, f)]


def shear(x, step, *, axis=-1, channel_axis=-3, mask=None):
    """``out[..., c, ..., w + o_c] = (mask * x)[..., c, ..., w]`` element by element."""
    x = np.asarray(x)
    z = x if mask is None else x * np.asarray(mask)
    z = np.broadcast_to(z, np.broadcast_shapes(z.shape, x.shape))
    ax, cax = axis % x.ndim, channel_axis % x.ndim
    offs = offsets_of(step, x.shape[cax])
    shape = list(x.shape)
    shape[ax] += math.ceil(max(offs))
    out = np.zeros(shape, dtype=np.result_type(z.dtype, np.float64))
    for idx in itertools.product(*(range(n) for n in x.shape)):
        for pos, weight in _weights(offs[idx[cax]]):
            dst = list(idx)
            dst[ax] += pos
            out[tuple(dst)] += weight * z[idx]
    return out


def unshear(y, step, *, axis=-1, channel_axis=-3, mask=None):
    """``x[..., c, ..., w] = conj(mask) * y[..., c, ..., w + o_c]`` element by element."""
    y = np.asarray(y)
    ax, cax = axis % y.ndim, channel_axis % y.ndim
    offs = offsets_of(step, y.shape[cax])
    shape = list(y.shape)
    shape[ax] -= math.ceil(max(offs))
    x = np.zeros(shape, dtype=np.result_type(y.dtype, np.float64))
    for idx in itertools.product(*(range(n) for n in shape)):
        for pos, weight in _weights(offs[idx[cax]]):
            src = list(idx)
            src[ax] += pos
            x[idx] += weight * y[tuple(src)]
    if mask is not None:
        x = x * np.conj(np.asarray(mask))
    return x


# ---------------------------------------------------------------- published CASSI code


def mst_shift(inputs, step=2):
    """MST (caiyuanhao1998/MST), simulation ``utils.shift``: the sheared cube."""
    bs, nC, row, col = inputs.shape
    output = np.zeros((bs, nC, row, col + (nC - 1) * step), dtype=inputs.dtype)
    for i in range(nC):
        output[:, i, :, step * i : step * i + col] = inputs[:, i, :, :]
    return output


def dauhst_shift_3d(inputs, step=2):
    """DAUHST / CST ``shift_3d``: ``torch.roll`` of each channel of a zero-padded cube.

    ``inputs[:, i] = roll(inputs[:, i], shifts=step * i, dims=2)`` on a
    (B, C, H, W + (C-1)*step) cube whose last (C-1)*step columns are zero.
    """
    inputs = inputs.copy()
    for i in range(inputs.shape[1]):
        inputs[:, i] = np.roll(inputs[:, i], step * i, axis=2)
    return inputs


def dauhst_shift_back_3d(inputs, step=2):
    """DAUHST / CST ``shift_back_3d``: roll each channel back by ``-step * i``."""
    inputs = inputs.copy()
    for i in range(inputs.shape[1]):
        inputs[:, i] = np.roll(inputs[:, i], -step * i, axis=2)
    return inputs


def mst_shift_back_4d(inputs, step=2):
    """MST / MST++ / BiSRNet mask-guided attention ``shift_back`` on a 4-D cube.

    ``inputs[:, i, :, :out_col] = inputs[:, i, :, int(step*i):int(step*i)+out_col]``
    with ``out_col = row`` and the step divided by the squared down-sampling factor
    ``256 // row`` (so the offsets are ``int(step * i)``: not evenly spaced once
    down-sampled).
    """
    inputs = inputs.copy()
    _bs, nC, row, _col = inputs.shape
    down_sample = 256 // row
    step = float(step) / float(down_sample * down_sample)
    out_col = row
    for i in range(nC):
        inputs[:, i, :, :out_col] = inputs[:, i, :, int(step * i) : int(step * i) + out_col]
    return inputs[:, :, :, :out_col]


def mst_shift_back_3d(inputs, step=2, nC=28):
    """MST simulation ``utils.shift_back``: the (B, H, W') measurement to (B, C, H, W)."""
    bs, row, col = inputs.shape
    output = np.zeros((bs, nC, row, col - (nC - 1) * step), dtype=inputs.dtype)
    for i in range(nC):
        output[:, i, :, :] = inputs[:, :, step * i : step * i + col - (nC - 1) * step]
    return output


def dauhst_y_shift(y, nC=28, step=2):
    """DAUHST ``initial``'s ``y_shift``: each channel's window of the measurement in place."""
    bs, row, col = y.shape
    y_shift = np.zeros((bs, nC, row, col), dtype=y.dtype)
    for i in range(nC):
        window = slice(step * i, step * i + col - (nC - 1) * step)
        y_shift[:, i, :, window] = y[:, :, window]
    return y_shift
