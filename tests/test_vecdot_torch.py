"""vecdot on PyTorch: gradients (both inputs), torch.compile, and the CPU paths."""

from __future__ import annotations

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


@pytest.fixture(params=["small", "function"])
def grad_path(request, monkeypatch):
    """``function``: the autograd.Function that large inputs use, forced for small ones.
    Plans are made afresh (a plan made under the other setting would run instead)."""
    from portops._ops.vecdot import PLANS

    if request.param == "function":
        from portops._backends.torch import vecdot as tv

        monkeypatch.setattr(tv, "GRAD_SMALL", 0)
    PLANS.clear()
    yield request.param
    PLANS.clear()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize(("s1", "s2", "axis", "keepdims"), GRAD_CASES)
def test_gradcheck(device, dtype, s1, s2, axis, keepdims, grad_path) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(s1, dtype=dtype, generator=gen).to(device).requires_grad_()
    b = torch.randn(s2, dtype=dtype, generator=gen).to(device).requires_grad_()

    def f(u, v):
        return portops.vecdot(u, v, axis=axis, keepdims=keepdims)

    if grad_path == "function" and device == "cpu":
        assert "Vecdot" in type(f(a, b).grad_fn).__name__
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
    y = portops.vecdot(a, b)
    assert y.dtype == torch.float64 and y.requires_grad
    (g,) = torch.autograd.grad(y.sum(), a)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g, b.float().expand(4, 70))


def test_calls_with_gradients_get_their_own_plan(grad_path) -> None:
    """A call with gradients is planned under its own key (torch's differentiable
    vecdot for small inputs, the autograd.Function for large ones), and the same
    tensors without gradients get another plan."""
    from portops._ops.vecdot import PLANS

    a = torch.randn(4, 70, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 70, dtype=torch.float64)
    for _ in range(3):
        y = portops.vecdot(a, b)
        (g,) = torch.autograd.grad(y.sum(), a)
        torch.testing.assert_close(g, b)
        assert ("Vecdot" in type(y.grad_fn).__name__) is (grad_path == "function")
    assert len(PLANS) == 1
    (plan,) = PLANS._plans.values()
    assert (plan is torch.linalg.vecdot) is (grad_path == "small")
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


def test_half_blocks(monkeypatch) -> None:
    from portops._backends.torch import vecdot as tv

    monkeypatch.setattr(tv, "BLOCK", 256)  # many small row blocks
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


def test_custom_op_opcheck() -> None:
    from portops._backends.torch.vecdot import _vecdot_op

    a = torch.randn(2, 3, 70, dtype=torch.float64, requires_grad=True)
    b = torch.randn(70, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(_vecdot_op, (a, b, -1, False))
    torch.library.opcheck(_vecdot_op, (a, b.detach(), -1, True))


def test_result_does_not_alias_numpy_inputs() -> None:
    a = np.ones((3, 80), np.float32)
    t = torch.from_numpy(a)
    y = portops.vecdot(t, t)
    y += 1
    np.testing.assert_array_equal(a, 1)


# ------------------------------------------------------------ NumPy views, remembered


def _memo_pair(shape=(64, 256)):
    from portops._backends.torch.views import ViewMemo

    g = torch.Generator().manual_seed(0)
    return ViewMemo(), torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def test_view_memo_reuses_views_of_the_same_tensors() -> None:
    memo, x1, x2 = _memo_pair()
    first = memo.views(x1, x2)
    second = memo.views(x1, x2)  # builds views that own nothing
    third = memo.views(x1, x2)
    assert third[0] is second[0] and third[1] is second[1]
    for views in (first, second, third):
        assert np.shares_memory(views[0], x1.numpy()) and np.shares_memory(views[1], x2.numpy())
        np.testing.assert_array_equal(views[0], x1.numpy())
    assert not third[0].flags.writeable


def test_view_memo_follows_values_and_storage() -> None:
    memo, x1, x2 = _memo_pair((8, 5, 300))
    x1 = x1[:, 1:, ::2]  # a strided view: its memory span is not its size
    x2 = x2[:, :4, 1::2]
    for _ in range(3):
        memo.views(x1, x2)
    x1.mul_(3)  # in place: the remembered views see it
    a1, a2 = memo.views(x1, x2)
    np.testing.assert_array_equal(a2, x2.numpy())
    np.testing.assert_array_equal(a1, x1.numpy())
    other = torch.randn(x1.shape)
    x1.set_(other.untyped_storage(), 0, other.shape, other.stride())
    a1, _ = memo.views(x1, x2)  # new memory: new views
    np.testing.assert_array_equal(a1, other.numpy())


def test_view_memo_keeps_no_tensor_alive() -> None:
    import gc
    import weakref

    memo, x1, x2 = _memo_pair()
    for _ in range(3):
        memo.views(x1, x2)
    refs = weakref.ref(x1), weakref.ref(x2)
    del x1, x2
    gc.collect()
    assert refs[0]() is None and refs[1]() is None
    _, y1, y2 = _memo_pair()
    np.testing.assert_array_equal(memo.views(y1, y2)[0], y1.numpy())


def test_view_memo_copies_tensors_numpy_cannot_view() -> None:
    memo, x1, x2 = _memo_pair()
    x1.requires_grad_()
    for _ in range(3):
        a1, _ = memo.views(x1, x2)
        np.testing.assert_array_equal(a1, x1.detach().numpy())


def test_numpy_plan_of_repeated_operands_matches_torch() -> None:
    """The L2-sized equal-shape plan, called again and again on the same tensors and on
    tensors changed in place between calls."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn((300, 200), generator=g), torch.randn((300, 200), generator=g)
    for i in range(4):
        torch.testing.assert_close(portops.vecdot(a, b), torch.linalg.vecdot(a, b))
        a.add_(float(i))
