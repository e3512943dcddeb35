"""Dispersion: the operator object agrees with the functional API and keeps Phi."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import shift_sum_reference as sref
from backends import assert_matches

import portops


def _problem(backend, step=2, shape=(2, 4, 5, 6), mask_shape=(5, 6)):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    mask = (rng.random(mask_shape) > 0.3).astype(np.float64)
    mask.flat[0] = 0.5
    y = rng.standard_normal(sref.forward(np.zeros(shape), step).shape)
    return x, mask, y


def test_matches_the_functional_api(backend):
    x, mask, y = _problem(backend)
    xb, mb, yb = backend.asarray(x), backend.asarray(mask), backend.asarray(y)
    A = portops.Dispersion(2, 4, mask=mb)
    assert_matches(backend, A(xb), sref.forward(x, 2, mask=mask))
    assert_matches(backend, A.forward(xb, keepdims=True), sref.forward(x, 2, mask=mask)[:, None])
    assert_matches(backend, A.adjoint(yb), sref.adjoint(y, 2, channels=4, mask=mask))
    want = backend.to_numpy(portops.shift_sum_pinv(yb, 2, channels=4, mask=mb))
    for _ in range(2):  # computing Phi, then with the kept Phi
        assert_matches(backend, A.pinv(yb), want)
    assert_matches(backend, A.shear(xb), portops.shear(x, 2, mask=mask))
    cube = backend.asarray(portops.shear(x, 2))
    assert_matches(backend, A.unshear(cube), x * mask)


def test_phi_is_computed_once(monkeypatch):
    x, mask, y = _problem(None)
    A = portops.Dispersion(2, 4, mask=mask)
    calls = []
    real = portops.dispersion.shift_sum

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(portops.dispersion, "shift_sum", counting)
    first = A.pinv(y)
    second = A.pinv(y * 2)
    assert len(calls) == 1
    np.testing.assert_allclose(second, 2 * first, rtol=1e-14)
    phi = A.phi(y)
    assert phi.shape == (1, *y.shape[1:])  # broadcasts against y
    np.testing.assert_allclose(phi[0], sref.forward(np.broadcast_to(mask**2, x.shape[1:]), 2))
    A.pinv(y.astype(np.float32))  # another dtype: its own Phi
    assert len(calls) == 2


def test_pinv_is_exact_and_finite_with_zeros_in_the_mask():
    x, mask, _ = _problem(None)
    mask[:, :2] = 0
    A = portops.Dispersion([0, 3, 1, 6], 4, mask=mask)
    y = A(x)
    x0 = A.pinv(y)
    assert np.all(np.isfinite(x0))
    np.testing.assert_allclose(A(x0), y, rtol=1e-12, atol=1e-12)
    dense = sref.dense_matrix(x.shape, [0, 3, 1, 6], mask=mask)
    want = (np.linalg.pinv(dense) @ y.reshape(-1)).reshape(x.shape)
    np.testing.assert_allclose(x0, want, rtol=1e-10, atol=1e-10)


def test_scale_recipes():
    """MST's ``/ nC * 2`` and DeepInverse's ``1 / C`` as `scale`; pinv undoes it."""
    x, mask, y = _problem(None)
    for scale in (2 / 4, 1 / 4, 2 / 4 * 1.2):
        A = portops.Dispersion(2, 4, mask=mask, scale=scale)
        np.testing.assert_allclose(A(x), sref.forward(x, 2, mask=mask) * scale, rtol=1e-14)
        lhs, rhs = np.vdot(A(x), y), np.vdot(x, A.adjoint(y))
        assert abs(lhs - rhs) <= 1e-12 * abs(lhs)
        np.testing.assert_allclose(A(A.pinv(A(x))), A(x), rtol=1e-12)
    y = y + 1j  # a complex scale of any type is conjugated by the adjoint
    for scale in (1 + 2j, np.complex64(1 + 2j), np.array(1 + 2j), np.array(2.0)):
        A = portops.Dispersion(2, 4, mask=mask, scale=scale)
        lhs, rhs = np.vdot(A(x), y), np.vdot(x, A.adjoint(y))
        assert abs(lhs - rhs) <= 1e-6 * abs(lhs)


def test_kept_phi_checks_the_mask_against_y():
    rng = np.random.default_rng(8)
    A = portops.Dispersion(2, 4, mask=rng.random((5, 6)))
    A.pinv(np.ones((2, 5, 12)))  # Phi kept for this width
    for y in (np.ones((2, 1, 12)), np.ones((2, 7, 12))):  # as when nothing was kept
        with pytest.raises(ValueError, match=r"mask of shape \(5, 6\) does not broadcast"):
            A.pinv(y)


def test_fractional_step_forward_adjoint_and_no_pinv(backend):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 3, 5))
    mask = rng.random((3, 5))
    xb, mb = backend.asarray(x), backend.asarray(mask)
    A = portops.Dispersion(0.5, 4, mask=mb, x_shape=x.shape)
    assert A.fractional and A.grow == 2 and A.y_shape == (2, 3, 7)
    y = rng.standard_normal(A.y_shape)
    ax = backend.to_numpy(A(xb))
    np.testing.assert_allclose(ax, portops.shear(x, 0.5, mask=mask).sum(axis=1), rtol=1e-12)
    aty = backend.to_numpy(A.adjoint(backend.asarray(y)))
    lhs, rhs = np.vdot(ax, y), np.vdot(x, aty)
    assert abs(lhs - rhs) <= 1e-12 * abs(lhs)
    for of_y in (A.pinv, A.phi):  # Phi of the whole offsets would be wrong here
        with pytest.raises(ValueError, match="Phi and pinv need integer offsets"):
            of_y(backend.asarray(y))


def test_shapes_and_errors():
    A = portops.Dispersion(2, 28, x_shape=(16, 28, 256, 256))
    assert A.y_shape == (16, 256, 310)
    assert A.shape == (16 * 256 * 310, 16 * 28 * 256 * 256)
    assert A.offsets == tuple(range(0, 56, 2)) and A.dtype is None
    assert "Dispersion(offsets=[0, 2" in repr(A)
    with pytest.raises(ValueError, match="without x_shape"):
        _ = portops.Dispersion(2, 3).shape
    with pytest.raises(ValueError, match="x_shape has 4 channels"):
        portops.Dispersion(2, 3, x_shape=(1, 4, 5, 6))
    with pytest.raises(TypeError, match="channels must be a positive integer"):
        portops.Dispersion(2, 2.0)
    with pytest.raises(ValueError, match="channels must be a positive integer"):
        portops.Dispersion(2, 0)
    with pytest.raises(TypeError, match="mask must be an array"):
        portops.Dispersion(2, 3, mask=[[1.0]])
    with pytest.raises(TypeError, match="y must have a floating-point dtype"):
        portops.Dispersion(2, 3).pinv(np.ones((2, 5, 8), dtype=np.int64))
    with pytest.raises(TypeError, match="scale must be a number, got str"):
        portops.Dispersion(2, 3, scale="a")
    for step in (1, 0.5):  # the channel count is named, not the offsets
        with pytest.raises(ValueError, match=r"x has 4 channels .* made with channels=3"):
            portops.Dispersion(step, 3)(np.ones((2, 4, 5, 6)))
    with pytest.raises(ValueError, match=r"y has 4 channels .* made with channels=3"):
        portops.Dispersion(1, 3).unshear(np.ones((2, 4, 5, 9)))
    with pytest.raises(ValueError, match="axis=1 and channel_axis=1 name the same axis"):
        portops.Dispersion(1, 3, axis=1, channel_axis=1)
    for op in ("pinv", "phi", "adjoint"):  # pinv and phi as the adjoint: y is named
        with pytest.raises(ValueError, match=r"y is too narrow: its axis -1 has length 3, but"):
            getattr(portops.Dispersion(2, 4), op)(np.ones((2, 5, 3)))


def test_scale_may_be_traced():
    """An array scale is multiplied, never tested: jax.jit/grad and torch.compile(fullgraph)
    trace a learnable scale through the forward and pinv."""
    x, _, y = _problem(None)
    want_y, want_x = (
        portops.Dispersion(2, 4, scale=2.0)(x),
        portops.Dispersion(2, 4, scale=2.0).pinv(y),
    )
    jax = pytest.importorskip("jax")
    forward = jax.jit(lambda s, x: portops.Dispersion(2, 4, scale=s)(x))
    pinv = jax.jit(lambda s, y: portops.Dispersion(2, 4, scale=s).pinv(y))
    np.testing.assert_allclose(forward(2.0, x), want_y, rtol=1e-5)  # (float32: no x64)
    np.testing.assert_allclose(pinv(2.0, y), want_x, rtol=1e-5, atol=1e-6)
    grad = jax.grad(lambda s: forward(s, x).sum())(2.0)
    np.testing.assert_allclose(grad, want_y.sum() / 2, rtol=1e-5)
    torch = pytest.importorskip("torch")
    scale = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    A = portops.Dispersion(2, 4, scale=scale)
    got = torch.compile(lambda x: A(x), fullgraph=True, backend="eager")(torch.from_numpy(x))
    got.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want_y)
    np.testing.assert_allclose(scale.grad.item(), want_y.sum() / 2)


def test_pinv_of_the_zero_operator_is_zero():
    """scale=0 makes A zero; its Moore-Penrose pseudo-inverse is zero too."""
    y = np.random.default_rng(3).random((2, 5, 12))
    x = portops.Dispersion(2, 4, scale=0).pinv(y)
    assert x.shape == (2, 4, 5, 6) and x.dtype == y.dtype and not x.any()


def test_dask_arrays_beside_a_numpy_mask():
    da = pytest.importorskip("dask.array")
    x, mask, y = _problem(None)
    xd, yd = da.from_array(x, chunks=(1, 2, 5, 6)), da.from_array(y, chunks=(1, 5, 4))
    for step in (2, 0.5):
        A = portops.Dispersion(step, 4, mask=mask)
        got = A(xd)
        assert isinstance(got, da.Array)
        np.testing.assert_allclose(got.compute(), A(x), rtol=1e-12)
        cube = A.shear(xd)
        np.testing.assert_allclose(cube.compute(), A.shear(x), rtol=1e-12)
        np.testing.assert_allclose(A.unshear(cube).compute(), A.unshear(A.shear(x)), rtol=1e-12)
    A = portops.Dispersion(2, 4, mask=mask)
    np.testing.assert_allclose(A.pinv(yd).compute(), A.pinv(y), rtol=1e-12)


def test_fractional_half_precision_sums_in_float32(backend):
    # 3000 ones summed in float16 stop at 2048; the channel sum runs in float32.
    if backend.library not in ("numpy", "torch", "jax"):
        pytest.skip("float16 arrays: NumPy, torch and JAX")
    channels = 3000
    x = backend.asarray(np.ones((channels, 1, 4), np.float16))
    A = portops.Dispersion([0.0] + [0.5] * (channels - 1), channels, channel_axis=0)
    got = A(x)
    assert got.dtype == x.dtype
    assert_matches(backend, got, np.array([[1500.0, 3000, 3000, 3000, 1500]], np.float16))


def test_float32_mask_keeps_float64_precision(backend):
    # Phi and the interpolation run in the result's precision, not the mask's or y's.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 4, 6))
    m32 = rng.uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    mb = backend.asarray(m32)
    y = portops.shift_sum(backend.asarray(x), 1, mask=mb)
    again = portops.shift_sum(portops.shift_sum_pinv(y, 1, channels=3, mask=mb), 1, mask=mb)
    np.testing.assert_allclose(backend.to_numpy(again), backend.to_numpy(y), rtol=0, atol=1e-13)
    A = portops.Dispersion(1, 3, mask=mb)
    np.testing.assert_allclose(backend.to_numpy(A(A.pinv(y))), backend.to_numpy(y), atol=1e-13)
    cube = rng.standard_normal((1, 3, 4, 7)).astype(np.float32)
    m64 = m32.astype(np.float64)
    got = portops.unshear(backend.asarray(cube), 0.1, mask=backend.asarray(m64))
    c64 = cube.astype(np.float64)
    want = (
        np.concatenate(
            [
                (1 - f) * c64[:, c : c + 1, :, 0:6] + f * c64[:, c : c + 1, :, 1:7]
                for c, f in enumerate((0.0, 0.1, 0.2))
            ],
            axis=1,
        )
        * m64
    )
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=1e-12, atol=1e-14)


def test_phi_not_kept_inside_jax_jit():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    _x, mask, y = _problem(None)
    A = portops.Dispersion(2, 4, mask=jnp.asarray(mask))
    f = jax.jit(A.pinv)
    got = f(jnp.asarray(y))
    assert not A._kept  # a tracer must not outlive its trace
    np.testing.assert_allclose(np.asarray(got), portops.shift_sum_pinv(y, 2, channels=4, mask=mask))
    np.testing.assert_allclose(np.asarray(A.pinv(jnp.asarray(y))), np.asarray(got), rtol=1e-12)
    assert A._kept


def test_torch_gradients_through_the_object():
    torch = pytest.importorskip("torch")
    _x, mask, y = _problem(None)
    m = torch.tensor(mask + 0.5, requires_grad=True)
    A = portops.Dispersion(2, 4, mask=m)
    yt = torch.tensor(y, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: A.pinv(t), (yt,))
    assert torch.autograd.gradcheck(
        lambda t, mm: portops.Dispersion(2, 4, mask=mm).pinv(t), (yt, m)
    )
    assert not A._kept  # a mask that needs gradients: Phi is part of the graph
    fixed = portops.Dispersion(2, 4, mask=m.detach())
    assert torch.autograd.gradcheck(lambda t: fixed.pinv(t), (yt,))
    assert fixed._kept


def test_integer_mask_is_squared_without_overflow():
    # 12 * 12 wraps in int8: Phi is computed in the result's floating dtype.
    mask, y = np.full((4, 6), 12, np.int8), np.ones((1, 4, 8))
    arrays = [(mask, y)]
    if importlib.util.find_spec("torch") is not None:
        import torch

        arrays.append((torch.from_numpy(mask), torch.from_numpy(y)))
    for m, yb in arrays:
        x = portops.shift_sum_pinv(yb, 1, channels=3, mask=m)
        np.testing.assert_allclose(np.asarray(portops.shift_sum(x, 1, mask=m)), y, rtol=1e-12)
        A = portops.Dispersion(1, 3, mask=m)
        np.testing.assert_allclose(np.asarray(A(A.pinv(yb))), y, rtol=1e-12)
