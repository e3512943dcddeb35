"""The "coming from" pages of the documentation, checked line by line.

Each test writes the original project's function in a few lines, following how that
project defines it (minus its hard-coded ``.cuda()``), and checks the portops call that
the documentation gives for it.
"""

from __future__ import annotations

import pytest

import portops

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")

B, C, H, W, S = 2, 6, 5, 8, 2


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(2023)


# ------------------------------------------------- MST / TSA-Net (simulation utils.py)


def mst_shift(inputs, step=2):
    """MST and TSA-Net ``shift``: channel i moved right by step*i into a wider cube."""
    bs, nC, row, col = inputs.shape
    output = torch.zeros(bs, nC, row, col + (nC - 1) * step)
    for i in range(nC):
        output[:, i, :, step * i : step * i + col] = inputs[:, i, :, :]
    return output


def mst_shift_back(inputs, step=2, nC=C):
    """MST and TSA-Net ``shift_back``: (bs, row, col') to (bs, nC, row, col) windows."""
    bs, row, col = inputs.shape
    output = torch.zeros(bs, nC, row, col - (nC - 1) * step)
    for i in range(nC):
        output[:, i, :, :] = inputs[:, :, step * i : step * i + col - (nC - 1) * step]
    return output


def mst_gen_meas_torch(data_batch, mask3d_batch, Y2H=True, mul_mask=False):
    """MST ``gen_meas_torch``: the measurement, or its 'H' initialisation."""
    nC = data_batch.shape[1]
    temp = mst_shift(mask3d_batch * data_batch, 2)
    meas = torch.sum(temp, 1)
    if Y2H:
        meas = meas / nC * 2
        H = mst_shift_back(meas)
        if mul_mask:
            return torch.mul(H, mask3d_batch)
        return H
    return meas


def mst_shift_back_3d(inputs, step=2):
    """MST (DAUHST, GAP-Net) ``shift_back_3d``: roll channel i back by step*i."""
    inputs = inputs.clone()
    for i in range(inputs.shape[1]):
        inputs[:, i, :, :] = torch.roll(inputs[:, i, :, :], shifts=(-1) * step * i, dims=2)
    return inputs


def mst_shift_masks(mask2d, nC, step=2):
    """MST ``generate_shift_masks``: Phi = mask_3d_shift, Phi_s = sum Phi^2 (0 -> 1)."""
    Phi = mst_shift(mask2d.expand(1, nC, *mask2d.shape), step)
    Phi_s = torch.sum(Phi**2, 1)
    Phi_s[Phi_s == 0] = 1
    return Phi, Phi_s


def test_mst_shift_then_sum_is_shift_sum(gen):
    x = torch.rand(B, C, H, W, generator=gen)
    torch.testing.assert_close(portops.shift_sum(x, S), mst_shift(x, S).sum(1))


def test_mst_shift_back_is_the_adjoint(gen):
    y = torch.rand(B, H, W + (C - 1) * S, generator=gen)
    torch.testing.assert_close(portops.shift_sum_adjoint(y, S, channels=C), mst_shift_back(y))


def test_mst_gen_meas(gen):
    x = torch.rand(B, C, H, W, generator=gen)
    mask = (torch.rand(H, W, generator=gen) > 0.5).float()
    mask3d = mask.expand(B, C, H, W)  # MST's generate_masks tiles the 2-D mask
    meas = portops.shift_sum(x, 2, mask=mask)
    torch.testing.assert_close(meas, mst_gen_meas_torch(x, mask3d, Y2H=False))
    h = portops.shift_sum_adjoint(meas, 2, channels=C) * (2 / C)
    torch.testing.assert_close(h, mst_gen_meas_torch(x, mask3d, Y2H=True))
    hm = portops.shift_sum_adjoint(meas, 2, channels=C, mask=mask) * (2 / C)
    torch.testing.assert_close(hm, mst_gen_meas_torch(x, mask3d, Y2H=True, mul_mask=True))


def test_mst_phi_normalised_initial_estimate_is_the_pinv(gen):
    x = torch.rand(B, C, H, W, generator=gen)
    mask = (torch.rand(H, W, generator=gen) > 0.5).float()
    y = portops.shift_sum(x, 2, mask=mask)
    Phi, Phi_s = mst_shift_masks(mask, C)
    # DAUHST / GAP-Net: x0 = At(y / Phi_s, Phi) in the sheared cube, shifted back, cropped.
    x0_sheared = (y / Phi_s).unsqueeze(1) * Phi
    x0 = mst_shift_back_3d(x0_sheared)[..., :W]
    torch.testing.assert_close(portops.shift_sum_pinv(y, 2, channels=C, mask=mask), x0)
    # Phi_s itself (before 0 -> 1) is the forward of the squared mask.
    phi = portops.shift_sum(mask.expand(C, H, W) ** 2, 2)
    torch.testing.assert_close(torch.where(phi == 0, 1.0, phi), Phi_s[0])


def test_mst_mask_3d_shift_is_a_mask_per_channel(gen):
    x = torch.rand(B, C, H, W, generator=gen)
    Phi = torch.rand(1, C, H, W + (C - 1) * S, generator=gen)  # any sheared-domain mask
    y_mst = torch.sum(mst_shift(x, S) * Phi, 1)  # MST's A(shift(x), Phi)
    mask = torch.stack([Phi[:, c, :, S * c : S * c + W] for c in range(C)], 1)
    torch.testing.assert_close(portops.shift_sum(x, S, mask=mask), y_mst)


# ------------------------------------- DeepInverse physics.CompressiveSpectralImaging


def deepinv_shear(x, shear_dir="h", un=False):
    """DeepInverse ``shear``: channel i moved by +i (or -i) pixels, size kept."""
    out = torch.zeros_like(x)
    dim = -2 if shear_dir == "h" else -1
    n = x.shape[dim]
    for i in range(x.shape[1]):
        s = -i if un else i
        src = x[:, i].narrow(dim, max(0, -s), n - abs(s))
        out[:, i].narrow(dim, max(0, s), n - abs(s)).copy_(src)
    return out


def deepinv_pad(x, C, shear_dir="h", value=0.0):
    pad = (0, 0, 0, C - 1) if shear_dir == "h" else (0, C - 1)
    return F.pad(x, pad, value=value)


def deepinv_cassi_sd(x, mask, shear_dir="h"):
    """Mode 'sd': y = mean_c(shear(pad(mask * x))), shape (B, 1, H + C - 1, W)."""
    sheared = deepinv_shear(deepinv_pad(mask * x, x.shape[1], shear_dir), shear_dir)
    return sheared.mean(1, keepdim=True)


def deepinv_cassi_sd_adjoint(y, mask, shear_dir="h"):
    """Mode 'sd' adjoint: mask * crop(unshear(y repeated over C, divided by C))."""
    C = mask.shape[1]
    rep = y.expand(y.shape[0], C, *y.shape[2:]) / C
    un = deepinv_shear(rep, shear_dir, un=True)
    cropped = un[:, :, : 1 - C, :] if shear_dir == "h" else un[..., : 1 - C]
    return mask * cropped


def deepinv_cassi_ss(x, mask_padded, shear_dir="h"):
    """Mode 'ss': y = crop(mean_c(unshear(mask * shear(pad(x))))), mask sheared-domain."""
    C = x.shape[1]
    sheared = deepinv_shear(deepinv_pad(x, C, shear_dir), shear_dir)
    z = deepinv_shear(mask_padded * sheared, shear_dir, un=True)
    z = z.mean(1, keepdim=True)
    return z[:, :, : 1 - C, :] if shear_dir == "h" else z[..., : 1 - C]


@pytest.mark.parametrize(("shear_dir", "axis"), [("h", -2), ("w", -1)])
def test_deepinv_sd_mode(gen, shear_dir, axis):
    x = torch.rand(B, C, H, W, generator=gen)
    mask = (torch.rand(B, C, H, W, generator=gen) > 0.5).float()
    y = portops.shift_sum(x, 1, axis=axis, mask=mask, keepdims=True) / C
    torch.testing.assert_close(y, deepinv_cassi_sd(x, mask, shear_dir))
    x_adj = portops.shift_sum_adjoint(y, 1, channels=C, axis=axis, mask=mask, keepdims=True) / C
    torch.testing.assert_close(x_adj, deepinv_cassi_sd_adjoint(y, mask, shear_dir))


def test_deepinv_ss_mode(gen):
    x = torch.rand(B, C, H, W, generator=gen)
    mask_padded = (torch.rand(B, C, H + C - 1, W, generator=gen) > 0.5).float()
    # The sheared-domain mask seen from each channel: its window at that channel's shift.
    mask = torch.stack([mask_padded[:, c, c : c + H] for c in range(C)], 1)
    y = portops.shift_sum(x, 0, mask=mask, keepdims=True) / C
    torch.testing.assert_close(y, deepinv_cassi_ss(x, mask_padded))


# ------------------------------------- the shift-and-sum question's three methods


def seed_method_1(x, mask, S):
    """Method 1 (slice-add loop) ``A`` and its ``A_pinv`` from the question."""
    B, C, H, W = x.shape
    z = x * mask
    y = torch.zeros(B, 1, H, W + (C - 1) * S)
    for i in range(C):
        y[..., i * S : i * S + W] += z[:, i : i + 1]
    return y


def seed_alpha(C, W, S):
    alpha = torch.zeros(1, 1, 1, W + (C - 1) * S)
    for i in range(C):
        alpha[..., i * S : i * S + W] += 1
    return alpha


def seed_pinv(y, mask, C, S):
    W = y.shape[-1] - (C - 1) * S
    z = y / seed_alpha(C, W, S)
    return torch.cat([z[..., i * S : i * S + W] for i in range(C)], dim=1) / mask


def seed_method_2(x, mask, S):
    """Method 2: one large conv2d with a kernel of ones at i*S."""
    C = x.shape[1]
    kernel = torch.zeros(1, C, 1, (C - 1) * S + 1)
    for i in range(C):
        kernel[:, C - i - 1, :, i * S] = 1
    return F.conv2d(x * mask, kernel, padding=(0, (C - 1) * S))


def seed_method_3(x, mask, S):
    """Method 3 (the answer): scatter_add_ with precomputed indices."""
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    i_list, y_list, x_list = torch.arange(C), torch.arange(H), torch.arange(W)
    indices = x_list + i_list.view(C, 1, 1) * S + y_list.view(1, H, 1) * out_W
    indices = indices.view(1, C * H * W).expand(B, C * H * W)
    y = torch.zeros(B, H * out_W)
    y.scatter_add_(1, indices, (x * mask).reshape(B, C * H * W))
    return y.view(B, 1, H, out_W)


@pytest.mark.parametrize("method", [seed_method_1, seed_method_2, seed_method_3])
def test_seed_methods_are_shift_sum(gen, method):
    x = torch.rand(B, C, H, W, generator=gen)
    mask = torch.rand(1, 1, H, W, generator=gen)
    y = portops.shift_sum(x, S, mask=mask, keepdims=True)
    torch.testing.assert_close(y, method(x, mask, S), rtol=1e-5, atol=1e-5)


def test_seed_pinv(gen):
    x = torch.rand(B, C, H, W, generator=gen, dtype=torch.float64)
    ones = torch.ones(1, 1, H, W, dtype=torch.float64)
    # With an all-ones mask, the question's A_pinv is the pseudo-inverse.
    y = seed_method_1(x.float(), ones.float(), S).double()
    x0 = portops.shift_sum_pinv(y, S, channels=C, mask=ones, keepdims=True)
    torch.testing.assert_close(x0, seed_pinv(y, ones, C, S))
    # With a coded mask, both give an x0 that reproduces y, but only shift_sum_pinv has
    # the minimum norm, and only it stays finite where the mask is zero.
    mask = torch.rand(1, 1, H, W, generator=gen, dtype=torch.float64) + 0.05
    y = portops.shift_sum(x, S, mask=mask, keepdims=True)
    x_seed = seed_pinv(y, mask, C, S)
    x_pinv = portops.shift_sum_pinv(y, S, channels=C, mask=mask, keepdims=True)
    torch.testing.assert_close(portops.shift_sum(x_seed, S, mask=mask, keepdims=True), y)
    torch.testing.assert_close(portops.shift_sum(x_pinv, S, mask=mask, keepdims=True), y)
    assert torch.linalg.vector_norm(x_pinv) < torch.linalg.vector_norm(x_seed)
    mask[..., 0, 0] = 0
    y = portops.shift_sum(x, S, mask=mask, keepdims=True)
    assert not torch.isfinite(seed_pinv(y, mask, C, S)).all()
    assert torch.isfinite(portops.shift_sum_pinv(y, S, channels=C, mask=mask, keepdims=True)).all()


def test_deepinv_sd_mode_dagger(gen):
    x = torch.rand(1, 3, 4, 5, generator=gen, dtype=torch.float64)
    mask = (torch.rand(1, 3, 4, 5, generator=gen) > 0.3).double()
    y = deepinv_cassi_sd(x, mask)
    dense = torch.stack(
        [deepinv_cassi_sd(e.reshape(x.shape), mask).ravel() for e in torch.eye(x.numel())], 1
    )
    x_dagger = (torch.linalg.pinv(dense) @ y.ravel()).reshape(x.shape)
    x0 = portops.shift_sum_pinv(y * 3, 1, channels=3, axis=-2, mask=mask, keepdims=True)
    torch.testing.assert_close(x0, x_dagger)
