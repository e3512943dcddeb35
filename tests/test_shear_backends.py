"""shear / unshear promises per backend: torch autograd and compile, JAX jit/grad, lazy Dask."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import shear_reference as ref
from backends import assert_compiled_matches_eager, requested_backends

import portops


def _import(name: str):
    """Import a backend library; fail (not skip) when it was requested explicitly."""
    names, explicit = requested_backends()
    if explicit and name in names:
        return importlib.import_module(name)
    return pytest.importorskip(name)


@pytest.fixture
def torch():
    return _import("torch")


# (x shape, step, axis, channel_axis, mask shape)
GRADIENT_CASES = [
    ((2, 3, 4, 5), 2, -1, -3, (4, 5)),
    ((3, 4, 2), [0, 2, 1], -1, 0, (3, 1, 2)),
    ((2, 4, 3, 2), 1, -2, -1, (2, 4, 3, 1)),
    ((2, 3, 2, 4), 0.5, -1, -3, (2, 4)),
    ((3, 2, 3), [0, 1.25, 0.5], -1, 0, (3, 1, 3)),
]


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), GRADIENT_CASES)
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("compiled_op", [False, True], ids=["function", "custom-op"])
def test_torch_gradcheck(
    torch, monkeypatch, shape, step, axis, cax, mask_shape, dtype, compiled_op
):
    """gradcheck / gradgradcheck in the array and the mask, eager Function and custom op."""
    if compiled_op:  # the path torch.compile takes (the custom ops), run eagerly
        from portops import _torch_state

        monkeypatch.setattr(_torch_state, "_is_compiling", lambda: True)
    opts = {"dtype": getattr(torch, dtype), "requires_grad": True}
    kw = {"axis": axis, "channel_axis": cax}
    x = torch.randn(shape, **opts)
    mask = torch.randn(mask_shape, **opts)
    y = torch.randn(ref.shear(np.zeros(shape), step, **kw).shape, **opts)

    def fwd(x, m):
        return portops.shear(x, step, **kw, mask=m)

    def back(y, m):
        return portops.unshear(y, step, **kw, mask=m)

    assert torch.autograd.gradcheck(fwd, (x, mask))
    assert torch.autograd.gradcheck(back, (y, mask))
    assert torch.autograd.gradgradcheck(fwd, (x, mask))
    assert torch.autograd.gradgradcheck(back, (y, mask))
    assert torch.autograd.gradcheck(lambda t: fwd(t, None), (x,))


def test_torch_backward_is_unshear(torch):
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(4, 5, dtype=torch.float64)
    g = torch.randn(2, 3, 4, 9, dtype=torch.float64)
    portops.shear(x, 2, mask=mask).backward(g)
    torch.testing.assert_close(x.grad, portops.unshear(g, 2, mask=mask))


@pytest.mark.parametrize("backend_name", ["aot_eager", "inductor"])
@pytest.mark.parametrize("step", [2, 0.5])
def test_torch_compile_fullgraph(torch, backend_name, step):
    def loss(x, mask):
        cube = portops.shear(x, step, mask=mask)
        return (portops.unshear(cube, step, mask=mask) - x).square().sum() + cube.sum()

    assert_compiled_matches_eager(loss, backend_name)


def test_torch_compile_recompiles_for_another_float_step(torch):
    """The same function compiled over a second step value: Dynamo makes the float step
    symbolic (automatic dynamic). torch 2.11's symbolic floats fail inside the shear
    operator's fake-tensor call ('BooleanTrue' object has no attribute 'as_coeff_Mul')."""
    from packaging.version import Version

    if Version(torch.__version__.split("+")[0]) < Version("2.13"):
        pytest.skip("torch < 2.13: symbolic float steps fail inside torch (see docstring)")
    torch._dynamo.reset()
    x = torch.randn(2, 3, 4, 5)
    for step in (0.5, 0.25):

        def loss(t, step=step):
            return portops.shear(t, step).square().sum()

        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x), loss(x))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half(torch, dtype):
    dt = getattr(torch, dtype)
    x = torch.randn(2, 3, 4, 5).to(dt)
    for step in (1, 0.5):
        got = portops.shear(x, step)
        assert got.dtype == dt
        want = ref.shear(x.float().numpy(), step)
        np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-2, atol=2e-2)
        assert portops.unshear(got, step).dtype == dt


def test_torch_large_results_are_plain_tensors(torch):
    x = torch.randn(2, 28, 64, 600)
    y = portops.shear(x, 2)
    assert y.shape == (2, 28, 64, 654) and y.is_contiguous()
    assert torch.equal(portops.unshear(y, 2), x)
    torch.testing.assert_close(y.sum(1), portops.shift_sum(x, 2))


@pytest.fixture
def jax():
    jax = _import("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.mark.parametrize("step", [2, [0, 2, 1], 0.5])
def test_jax_jit_and_grad(jax, step):
    jnp = jax.numpy
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 3, 4, 5)))
    mask = jnp.asarray(rng.random((4, 5)) + 0.5)
    f = jax.jit(lambda x: portops.shear(x, step, mask=mask))
    want = ref.shear(np.asarray(x), step, mask=np.asarray(mask))
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-12)
    g = jax.grad(lambda x: (portops.shear(x, step, mask=mask) ** 2).sum())(x)
    expected = 2 * ref.unshear(want, step, mask=np.asarray(mask))
    np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-12)
    gy = jax.grad(lambda y: (portops.unshear(y, step) ** 2).sum())(jnp.asarray(want))
    np.testing.assert_allclose(
        np.asarray(gy), 2 * ref.shear(ref.unshear(want, step), step), rtol=1e-12
    )


def test_dask_stays_lazy_and_keeps_other_chunks():
    _import("dask")
    import dask.array as da

    x = da.random.default_rng(0).standard_normal((8, 4, 6, 10), chunks=(2, 2, 3, 5))
    for step in (2, 0.5):
        y = portops.shear(x, step)
        assert isinstance(y, da.Array)
        assert y.chunks[0] == (2, 2, 2, 2) and y.chunks[2] == (3, 3)
        np.testing.assert_allclose(y.compute(), ref.shear(x.compute(), step), rtol=1e-12)
        back = portops.unshear(y, step)
        assert isinstance(back, da.Array) and back.chunks[0] == (2, 2, 2, 2)
        np.testing.assert_allclose(back.compute(), ref.unshear(y.compute(), step), rtol=1e-12)
