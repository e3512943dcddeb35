"""Backend-specific promises: torch autograd and compile, JAX jit/grad, lazy Dask."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import shift_sum_reference as ref
from backends import assert_compiled_matches_eager, requested_backends

import portops


def _requested(name: str) -> bool:
    names, explicit = requested_backends()
    return explicit and name in names


def _import(name: str):
    """Import a backend library; fail (not skip) when it was requested explicitly."""
    if _requested(name):
        return importlib.import_module(name)
    return pytest.importorskip(name)


# --------------------------------------------------------------------------- torch


@pytest.fixture
def torch():
    return _import("torch")


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), ref.GRADIENT_CASES)
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_torch_gradcheck(torch, shape, step, axis, cax, mask_shape, dtype):
    ref.check_gradients(torch, shape, step, axis, cax, mask_shape, dtype, "cpu")


def test_torch_backward_is_the_adjoint(torch):
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(4, 5, dtype=torch.float64)
    g = torch.randn(2, 4, 9, dtype=torch.float64)
    portops.shift_sum(x, 2, mask=mask).backward(g)
    expected = portops.shift_sum_adjoint(g, 2, channels=3, mask=mask)
    torch.testing.assert_close(x.grad, expected)


@pytest.mark.parametrize("backend_name", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(torch, backend_name):
    def loss(x, mask):
        y = portops.shift_sum(x, 2, mask=mask)
        return (portops.shift_sum_pinv(y, 2, channels=3, mask=mask) - x).square().sum()

    assert_compiled_matches_eager(loss, backend_name)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half_and_autocast(torch, dtype):
    dt = getattr(torch, dtype)
    x = torch.randn(2, 3, 4, 5).to(dt)
    got = portops.shift_sum(x, 1)
    assert got.dtype == dt
    want = ref.forward(x.float().numpy(), 1)
    np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-2, atol=2e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = portops.shift_sum(torch.randn(2, 3, 4, 5), 1)
    assert y.dtype == torch.float32  # custom ops keep their input dtype under autocast


@pytest.mark.parametrize("impl", [None, "torch/slice_add", "torch_slice_add_loop"])
@pytest.mark.parametrize("mask_dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("x_dtype", ["float32", "complex64"])
def test_torch_integer_masks_promote_as_torch_does(torch, impl, mask_dtype, x_dtype):
    # NumPy promotes float32 with int32 to float64; torch keeps float32, whatever runs.
    x = torch.randn(2, 3, 4, 5).to(getattr(torch, x_dtype))
    mask = torch.randint(0, 3, (4, 5)).to(getattr(torch, mask_dtype))
    with portops.prefer(**({} if impl is None else {"shift_sum": impl})):
        got = portops.shift_sum(x, 1, mask=mask)  # (NumPy's kernels refuse integer masks)
    assert got.dtype == torch.result_type(x, mask) == x.dtype
    want = ref.forward(x.numpy().astype(np.complex128), 1, mask=mask.numpy().astype(np.float64))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_torch_scatter_add_alternative_matches(torch):
    x = torch.randn(2, 5, 6, 7, dtype=torch.float64)
    mask = torch.rand(6, 7, dtype=torch.float64)
    with portops.prefer(shift_sum="torch_scatter_add"):
        got = portops.shift_sum(x, -2, mask=mask)
    want = ref.forward(x.numpy(), -2, mask=mask.numpy())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_torch_large_results_are_plain_tensors(torch):
    """Results allocated through NumPy behave like any tensor (resize, grad, device)."""
    y = torch.randn(2, 1, 64, 600 + 27 * 2)
    x = portops.shift_sum_adjoint(y, 2, channels=28, keepdims=True)
    assert x.shape == (2, 28, 64, 600)
    assert x.device.type == "cpu" and x.is_contiguous()
    z = x * 2  # ordinary arithmetic
    assert torch.equal(z / 2, x)


def test_torch_autograd_skips_signature_binding_outside_transforms(torch, monkeypatch):
    """Outside torch.func the operators' Function runs without Function.apply's binding of
    its arguments to a signature (host time per call); under a transform, through it."""
    import inspect

    bind, bound = inspect.Signature.bind, []

    def counting(self, *args, **kwargs):
        bound.append(1)
        return bind(self, *args, **kwargs)

    monkeypatch.setattr(inspect.Signature, "bind", counting)
    x = torch.randn(2, 3, 8, 10, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 8, 14, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(8, 10, dtype=torch.float64)

    def loss(t):
        return portops.shift_sum(t, 2, mask=mask).square().sum()

    (loss(x) + portops.shift_sum_adjoint(y, 2, channels=3).sum()).backward()
    assert bound == []
    with torch.no_grad():  # d/dx |A(m x)|^2 = 2 m A^H A(m x); d/dy sum(A^H y) = A(1)
        forward = portops.shift_sum(x, 2, mask=mask)
        want = 2 * portops.shift_sum_adjoint(forward, 2, channels=3, mask=mask)
        ones = portops.shift_sum(torch.ones(2, 3, 8, 10, dtype=torch.float64), 2)
    np.testing.assert_allclose(x.grad.numpy(), want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ones.numpy(), rtol=1e-12)
    grad = torch.func.grad(loss)(x.detach())
    assert bound  # under torch.func: Function.apply, which binds
    np.testing.assert_allclose(grad.numpy(), want.numpy(), rtol=1e-12)


# --------------------------------------------------------------------------- jax


@pytest.fixture
def jax():
    jax = _import("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def test_jax_jit_and_grad(jax):
    jnp = jax.numpy
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 4, 5)))
    mask = jnp.asarray(np.random.default_rng(1).random((4, 5)) + 0.5)

    @jax.jit
    def f(x, mask):
        return portops.shift_sum(x, 2, mask=mask)

    np.testing.assert_allclose(
        np.asarray(f(x, mask)), ref.forward(np.asarray(x), 2, mask=np.asarray(mask)), rtol=1e-12
    )
    g = jax.grad(lambda x: (portops.shift_sum(x, 2, mask=mask) ** 2).sum())(x)
    y = portops.shift_sum(x, 2, mask=mask)
    expected = 2 * ref.adjoint(np.asarray(y), 2, channels=3, mask=np.asarray(mask))
    np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-12)
    pinv = jax.jit(lambda y: portops.shift_sum_pinv(y, 2, channels=3, mask=mask))
    np.testing.assert_allclose(np.asarray(portops.shift_sum(pinv(y), 2, mask=mask)), y)


# --------------------------------------------------------------------------- dask


@pytest.fixture
def dask_array():
    _import("dask")
    import dask.array as da

    return da


def test_dask_stays_lazy_and_rechunks_only_needed_axes(dask_array):
    da = dask_array
    x = da.random.default_rng(0).standard_normal((8, 4, 6, 10), chunks=(2, 2, 3, 5))
    y = portops.shift_sum(x, 2)
    assert isinstance(y, da.Array)
    assert y.chunks[0] == (2, 2, 2, 2) and y.chunks[1] == (3, 3)  # batch/rows kept
    assert y.chunks[2] == (16,)  # the shifted axis is whole
    np.testing.assert_allclose(y.compute(), ref.forward(x.compute(), 2), rtol=1e-12)


def test_dask_distributed_local_cluster(dask_array):
    distributed = _import("distributed")
    da = dask_array
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster,
        distributed.Client(cluster),
    ):
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((4, 3, 6, 8))
        m_np = rng.random((6, 8))
        x = da.from_array(x_np, chunks=(1, 3, 3, 8))
        y = portops.shift_sum(x, 1, mask=da.from_array(m_np, chunks=(3, 8)))
        np.testing.assert_allclose(y.compute(), ref.forward(x_np, 1, mask=m_np), rtol=1e-12)
