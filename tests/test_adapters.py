"""The operator adapters, each checked with its library's own tools.

SciPy: LSQR converges and, started from zero, reaches the minimum-norm solution, which
``pinv`` gives exactly. PyLops: ``pylops.utils.dottest`` and its CGLS solver.
DeepInverse: ``LinearPhysics.adjointness_test`` and the comparison with its own
``CompressiveSpectralImaging``.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import portops
from portops.adapters import shift_sum_linear_operator, shift_sum_physics, shift_sum_pylops
from portops.adapters._geometry import measurement_shape

RNG = np.random.default_rng(7)


def _mask_with_zeros(shape: tuple[int, ...]) -> np.ndarray:
    mask = RNG.random(shape)
    mask[mask < 0.3] = 0.0
    return mask


@pytest.mark.parametrize(
    ("x_shape", "step", "axis", "channel_axis", "keepdims"),
    [
        ((3, 4, 5), 2, -1, -3, False),
        ((2, 3, 4, 5), -1, -2, -3, True),
        ((4, 5, 3), [0, 2, 3], -2, -1, False),
    ],
)
def test_measurement_shape_matches_shift_sum(x_shape, step, axis, channel_axis, keepdims):
    x = RNG.random(x_shape)
    y = portops.shift_sum(x, step, axis=axis, channel_axis=channel_axis, keepdims=keepdims)
    shape = measurement_shape(
        x_shape, step, axis=axis, channel_axis=channel_axis, keepdims=keepdims
    )
    assert shape == y.shape


def test_adapters_reject_a_bad_x_shape():
    with pytest.raises(ValueError, match="x_shape must be a sequence of positive integers"):
        shift_sum_linear_operator((4, -5, 6), 1)
    with pytest.raises(TypeError, match="x_shape must be a sequence of positive integers"):
        portops.Dispersion(1, 4, x_shape=(4, 5.0, 6))


def test_measurement_shape_rejects_bad_arguments():
    with pytest.raises(ValueError, match="same axis"):
        measurement_shape((3, 4, 5), 1, axis=0, channel_axis=-3)
    with pytest.raises(ValueError, match="out of range"):
        measurement_shape((3, 4, 5), 1, axis=3)
    with pytest.raises(ValueError, match="2 offsets but there are 3 channels"):
        measurement_shape((3, 4, 5), [0, 1])


def test_importing_adapters_imports_no_solver_library():
    code = (
        "import sys, portops.adapters; "
        "print([m for m in ('scipy', 'pylops', 'deepinv', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- SciPy


@pytest.mark.parametrize("mask_kind", ["none", "random", "zeros"])
def test_scipy_lsqr_reaches_the_pinv(mask_kind):
    scipy_linalg = pytest.importorskip("scipy.sparse.linalg")
    x_shape = (6, 5, 7)
    mask = {
        "none": None,
        "random": RNG.random((5, 7)) + 0.1,
        "zeros": _mask_with_zeros((6, 5, 7)),
    }[mask_kind]
    A = shift_sum_linear_operator(x_shape, 2, mask=mask)
    assert A.shape == (5 * (7 + 10), 6 * 5 * 7)
    y = A.matvec(RNG.random(A.shape[1]))
    x_lsqr, istop, *_ = scipy_linalg.lsqr(A, y, atol=1e-14, btol=1e-14, iter_lim=2000)
    assert istop in (1, 2), f"LSQR stopped with istop={istop}"
    x_pinv = A.pinv(y)
    np.testing.assert_allclose(A.matvec(x_pinv), y, atol=1e-12)
    np.testing.assert_allclose(x_lsqr, x_pinv, atol=1e-9)
    expected = portops.shift_sum_pinv(np.reshape(y, A.y_shape), 2, channels=6, mask=mask)
    np.testing.assert_array_equal(x_pinv, expected.ravel())


def test_scipy_rmatvec_is_the_transpose_of_matvec():
    pytest.importorskip("scipy.sparse.linalg")
    mask = RNG.random((3, 4, 5)) + 1j * RNG.random((3, 4, 5))
    A = shift_sum_linear_operator((3, 4, 5), [0, 3, 1], mask=mask)
    assert A.dtype == np.complex128
    dense = A.matmat(np.eye(A.shape[1]))
    dense_h = A.H.matmat(np.eye(A.shape[0]))
    np.testing.assert_allclose(dense_h, dense.conj().T, atol=1e-14)


def test_scipy_pinv_matches_numpy_pinv_of_the_dense_matrix():
    pytest.importorskip("scipy.sparse.linalg")
    mask = _mask_with_zeros((4, 3, 5))
    A = shift_sum_linear_operator((4, 3, 5), 1, mask=mask)
    dense = A.matmat(np.eye(A.shape[1]))
    y = RNG.random(A.shape[0])
    np.testing.assert_allclose(A.pinv(y), np.linalg.pinv(dense) @ y, atol=1e-10)


# ---------------------------------------------------------------------------- PyLops


@pytest.mark.parametrize(
    ("x_shape", "step", "axis", "channel_axis", "complex_mask"),
    [
        ((6, 5, 7), 2, -1, -3, False),
        ((2, 4, 6, 5), [0, 1, 3, 4], -2, -3, False),
        ((5, 7, 3), -1, -2, -1, True),
    ],
)
def test_pylops_dottest(x_shape, step, axis, channel_axis, complex_mask):
    pylops_utils = pytest.importorskip("pylops.utils")
    mask = RNG.random(x_shape)
    dtype = "float64"
    if complex_mask:
        mask = mask + 1j * RNG.random(x_shape)
        dtype = "complex128"
    keywords = {"mask": mask, "axis": axis, "channel_axis": channel_axis, "dtype": dtype}
    Op = shift_sum_pylops(x_shape, step, **keywords)
    assert Op.dims == x_shape
    assert Op.dimsd == measurement_shape(x_shape, step, axis=axis, channel_axis=channel_axis)
    flag = 3 if complex_mask else 0
    assert pylops_utils.dottest(Op, *Op.shape, complexflag=flag, rtol=1e-10, raiseerror=True)


def test_pylops_cgls_reaches_the_pinv():
    pylops_basic = pytest.importorskip("pylops.optimization.basic")
    x_shape = (5, 6, 8)
    mask = _mask_with_zeros(x_shape)
    Op = shift_sum_pylops(x_shape, 1, mask=mask)
    y = Op @ RNG.random(Op.shape[1])
    x_cgls = pylops_basic.cgls(Op, y, x0=np.zeros(Op.shape[1]), niter=500, tol=1e-16)[0]
    x_pinv = portops.shift_sum_pinv(np.reshape(y, Op.dimsd), 1, channels=5, mask=mask)
    np.testing.assert_allclose(x_cgls, x_pinv.ravel(), atol=1e-8)


def test_pylops_operator_composes():
    pylops = pytest.importorskip("pylops")
    Op = shift_sum_pylops((3, 4, 5), 1)
    stacked = pylops.VStack([Op, 0.5 * pylops.Identity(Op.shape[1])])
    x = RNG.random(Op.shape[1])
    y = stacked @ x
    np.testing.assert_allclose(y[: Op.shape[0]], portops.shift_sum(x.reshape(3, 4, 5), 1).ravel())
    np.testing.assert_allclose(y[Op.shape[0] :], 0.5 * x)


# ---------------------------------------------------------------------------- DeepInverse


def _deepinv():
    pytest.importorskip("torch")
    try:
        return importlib.import_module("deepinv")
    except Exception as exc:  # deepinv imports torchvision, which must match torch's build
        pytest.skip(f"deepinv cannot be imported here: {type(exc).__name__}: {exc}")


def test_deepinv_adjointness_and_dagger():
    _deepinv()
    import torch

    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(8, 10, generator=gen) > 0.4).to(torch.float64)
    physics = shift_sum_physics(2, channels=5, mask=mask)
    x = torch.rand(2, 5, 8, 10, generator=gen, dtype=torch.float64)
    y = physics.A(x)
    assert y.shape == (2, 1, 8, 18)
    assert abs(float(physics.adjointness_test(x))) < 1e-10
    x0 = physics.A_dagger(y)
    torch.testing.assert_close(physics.A(x0), y)
    expected = portops.shift_sum_pinv(y, 2, channels=5, mask=mask, keepdims=True)
    torch.testing.assert_close(x0, expected)


def test_deepinv_matches_compressive_spectral_imaging():
    deepinv = _deepinv()
    import torch

    gen = torch.Generator().manual_seed(1)
    C, H, W = 4, 6, 7
    mask = (torch.rand(1, C, H, W, generator=gen) > 0.5).float()
    theirs = deepinv.physics.CompressiveSpectralImaging((C, H, W), mask=mask, mode="sd")
    ours = shift_sum_physics(1, channels=C, mask=mask, axis=-2)
    x = torch.rand(2, C, H, W, generator=gen)
    # Compare the linear parts: CompressiveSpectralImaging averages over channels.
    linear = theirs.A(x) - theirs.A(torch.zeros_like(x))
    torch.testing.assert_close(ours.A(x) / C, linear)
    y = torch.rand(2, 1, H + C - 1, W, generator=gen)
    torch.testing.assert_close(ours.A_adjoint(y) / C, theirs.A_adjoint(y))


def test_deepinv_adapter_methods_with_a_stand_in_base_class(monkeypatch):
    """The adapter's own logic, where deepinv cannot be imported (the tests above need it).

    A minimal ``deepinv.physics.LinearPhysics`` stand-in (an ``nn.Module`` whose
    ``__call__`` applies ``A``) takes the library's place; the checks are the same
    adjointness and pseudo-inverse identities.
    """
    torch = pytest.importorskip("torch")
    import types

    from portops.adapters import _deepinv

    class LinearPhysics(torch.nn.Module):
        def __init__(self, **kwargs):
            super().__init__()
            self.kwargs = kwargs

        def forward(self, x, **kwargs):
            return self.A(x, **kwargs)

    physics_module = types.ModuleType("deepinv.physics")
    physics_module.LinearPhysics = LinearPhysics
    package = types.ModuleType("deepinv")
    package.physics = physics_module
    monkeypatch.setitem(sys.modules, "deepinv", package)
    monkeypatch.setitem(sys.modules, "deepinv.physics", physics_module)
    _deepinv._physics_class.cache_clear()
    try:
        gen = torch.Generator().manual_seed(3)
        mask = (torch.rand(6, 7, generator=gen) > 0.3).double()
        physics = shift_sum_physics([0, 2, 3], channels=3, mask=mask, noise_model="n")
        assert isinstance(physics, LinearPhysics)
        assert physics.kwargs == {"noise_model": "n"}
        x = torch.rand(2, 3, 6, 7, generator=gen, dtype=torch.float64, requires_grad=True)
        y = physics(x)
        assert y.shape == (2, 1, 6, 10)
        v = torch.rand(y.shape, generator=gen, dtype=torch.float64)
        lhs = (v * y).sum()
        rhs = (physics.A_adjoint(v) * x).sum()
        torch.testing.assert_close(lhs, rhs)
        torch.testing.assert_close(physics.A(physics.A_dagger(y)), y)
        lhs.backward()
        torch.testing.assert_close(x.grad, physics.A_adjoint(v))
        other = torch.ones(6, 7, dtype=torch.float64)
        physics.A(x, mask=other)  # a mask given to a method replaces the physics' mask
        assert physics.mask is other
    finally:
        _deepinv._physics_class.cache_clear()


@pytest.mark.parametrize("module", ["_scipy", "_pylops"])
def test_adapter_docstring_examples(module):
    import doctest

    pytest.importorskip("scipy")
    if module == "_pylops":
        pytest.importorskip("pylops")
    mod = importlib.import_module(f"portops.adapters.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
