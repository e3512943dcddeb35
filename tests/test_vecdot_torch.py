"""vecdot on PyTorch: gradients (both inputs), torch.compile, and the CPU paths."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import portops

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference(a, b, axis=-1, keepdims=False):
    """torch.linalg.vecdot, with keepdims."""
    return (
        torch.linalg.vecdot(a, b, dim=axis).unsqueeze(axis)
        if keepdims
        else (torch.linalg.vecdot(a, b, dim=axis))
    )


GRAD_CASES = [
    ((3, 7), (3, 7), -1, False),
    ((2, 1, 70), (4, 70), -1, False),  # broadcasting: gradients are summed back
    ((70,), (3, 70), -1, True),
    ((5, 4, 3), (4, 3), -2, False),
]


@pytest.fixture(params=["auto", "native", "columns", "mv"])
def grad_path(request):
    """Every torch CPU strategy that keeps gradients, forced (those that do not apply to
    a case skip it), and the dispatcher's choice."""
    from backends import forced

    from portops._ops.vecdot import PLANS

    PLANS.clear()
    if request.param == "auto":
        yield nullcontext
    else:
        yield lambda: forced("vecdot", f"torch_cpu/{request.param}")
    PLANS.clear()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize(("s1", "s2", "axis", "keepdims"), GRAD_CASES)
def test_gradcheck(device, dtype, s1, s2, axis, keepdims, grad_path) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(s1, dtype=dtype, generator=gen).to(device).requires_grad_()
    b = torch.randn(s2, dtype=dtype, generator=gen).to(device).requires_grad_()

    def f(u, v):
        with grad_path():
            return portops.vecdot(u, v, axis=axis, keepdims=keepdims)

    if device != "cpu" and grad_path is not nullcontext:
        pytest.skip("the torch CPU strategies")
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))
    # Same gradients as torch's own vecdot.
    w = torch.randn(f(a, b).shape, dtype=dtype, generator=gen).to(device)
    got = torch.autograd.grad((f(a, b) * w).real.sum(), (a, b))
    want = torch.autograd.grad((reference(a, b, axis, keepdims) * w).real.sum(), (a, b))
    for g, h in zip(got, want, strict=True):
        torch.testing.assert_close(g, h)


def test_gradient_one_input_and_mixed_dtypes(grad_path) -> None:
    a = torch.randn(4, 70, dtype=torch.float32, requires_grad=True)
    b = torch.randn(70, dtype=torch.float64)
    with grad_path():
        y = portops.vecdot(a, b)
    assert y.dtype == torch.float64 and y.requires_grad
    (g,) = torch.autograd.grad(y.sum(), a)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g, b.float().expand(4, 70))


@pytest.mark.parametrize("shape", [(4, 70), (1000, 1000)])
def test_calls_with_gradients_get_their_own_plan(shape) -> None:
    """A call with gradients is planned under its own key (torch's differentiable
    calls, at every size), and the same tensors without gradients get another plan."""
    from portops._ops.vecdot import PLANS

    PLANS.clear()
    a = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(shape, dtype=torch.float64)
    for _ in range(3):
        y = portops.vecdot(a, b)
        (g,) = torch.autograd.grad(y.sum(), a)
        torch.testing.assert_close(g, b)
    assert len(PLANS) == 1
    (plan,) = PLANS._plans.values()
    assert plan is torch.linalg.vecdot
    with torch.no_grad():
        assert not portops.vecdot(a, b).requires_grad
    assert len(PLANS) == 2


def test_no_grad_mode_with_leaf_requiring_grad() -> None:
    a = torch.randn(3, 80, requires_grad=True)
    with torch.no_grad():
        y = portops.vecdot(a, a)
    assert not y.requires_grad
    torch.testing.assert_close(y, (a.detach() ** 2).sum(-1))


def test_conj_and_neg_views() -> None:
    a = torch.randn(3, 80, dtype=torch.complex64)
    b = torch.randn(3, 80, dtype=torch.complex64)
    for x1, x2 in [(a.conj(), b), (a, -b.conj()), (torch.neg(a.conj()).conj(), b)]:
        torch.testing.assert_close(portops.vecdot(x1, x2), torch.linalg.vecdot(x1, x2))


def test_half_precision() -> None:
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.randn(9, 3, 100, generator=gen).to(dtype)
        b = torch.randn(3, 100, generator=gen).to(dtype)
        for x1, x2 in [(a, b), (b, a), (a, a[:1])]:
            got = portops.vecdot(x1, x2)
            assert got.dtype == dtype
            want = torch.linalg.vecdot(x1.double(), x2.double()).to(dtype)
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("compiler", ["eager", "aot_eager"])
def test_torch_compile(compiler) -> None:
    a = torch.randn(4, 100, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 100, dtype=torch.float64, requires_grad=True)
    f = torch.compile(lambda u, v: portops.vecdot(u, v) * 2, backend=compiler)
    y = f(a, b)
    torch.testing.assert_close(y, 2 * (a * b).sum(-1))
    ga, gb = torch.autograd.grad(y.sum(), (a, b))
    torch.testing.assert_close(ga, 2 * b)
    torch.testing.assert_close(gb, 2 * a)


def test_result_does_not_alias_numpy_inputs() -> None:
    a = np.ones((3, 80), np.float32)
    t = torch.from_numpy(a)
    y = portops.vecdot(t, t)
    y += 1
    np.testing.assert_array_equal(a, 1)


def test_numpy_plan_of_repeated_operands_matches_torch() -> None:
    """The L2-sized equal-shape plan, called again and again on the same tensors and on
    tensors changed in place between calls."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn((300, 200), generator=g), torch.randn((300, 200), generator=g)
    for i in range(4):
        torch.testing.assert_close(portops.vecdot(a, b), torch.linalg.vecdot(a, b))
        a.add_(float(i))
