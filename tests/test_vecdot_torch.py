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
    calls, at every size), and the same tensors without gradients get another plan;
    tensors below ``views_min`` elements then take the direct call, with or without."""
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
    assert len(PLANS) == (1 if a.numel() < portops.tuning()["torch"]["views_min"] else 2)


DIRECT_CASES = [
    ((3, 7), (3, 7)),
    ((2, 1, 70), (4, 70)),  # different ndims: not direct
    ((2, 1, 70), (1, 4, 70)),  # broadcast, direct
    ((5, 40), (40,)),  # a vector against a matrix: mv
    ((40,), (5, 40)),  # the vector first: not direct
    ((5, 1), (1,)),  # a 1-element vector: not mv
    ((90, 100), (90, 100)),  # below torch's grain: direct
    ((2048, 4), (2048, 4)),  # past views_min, rows of 16 bytes (float32): not direct
    ((200, 200), (200, 200)),  # past torch's grain: not direct
    ((3, 1), (3, 8)),  # unequal lengths, which torch would broadcast: the full path's error
    ((3, 7), (3, 8)),  # torch refuses: the full path's error
    ((0, 4), (0, 4)),
]


@pytest.mark.parametrize(("s1", "s2"), DIRECT_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128, torch.float16, torch.int32])
@pytest.mark.parametrize("grad", [False, True])
def test_direct_calls_are_the_rules_choice(s1, s2, dtype, grad) -> None:
    """A call that skips the key (see Strategies' ``direct``) runs what the rule would
    choose for it, with the same result, gradients included; a call it does not take
    gets the full path, its plan and its errors."""
    from portops._ops.vecdot import PLANS

    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in (s1, s2))
    if grad and dtype in (torch.float32, torch.complex128):
        a.requires_grad_()
    portops.vecdot(torch.ones(2, 2), torch.ones(2, 2))  # a torch CPU call was planned
    direct = PLANS.direct[torch.Tensor]
    try:
        want = portops.vecdot(a, b)
    except ValueError as error:
        assert direct(a, b) is None and "same length" in str(error)
        return
    got = direct(a, b)
    if got is None:
        return
    strategy = portops.explain("vecdot", a, b).strategy
    assert strategy == ("native" if a.ndim == b.ndim else "mv")
    with portops.prefer(vecdot=f"torch_cpu/{strategy}"):
        torch.testing.assert_close(got, portops.vecdot(a, b))
    torch.testing.assert_close(got, want)
    assert got.requires_grad == a.requires_grad
    if a.requires_grad and got.numel():
        (g,) = torch.autograd.grad(got.real.sum(), a)
        (g_want,) = torch.autograd.grad(portops.vecdot(a, b).real.sum(), a)
        torch.testing.assert_close(g, g_want)


@pytest.mark.parametrize(
    ("s1", "s2"), [((3, 7), (3, 7)), ((200, 200), (200, 200)), ((2048, 4), (2048, 4)),
                   ((2, 1, 70), (1, 4, 70))]
)  # fmt: skip
def test_calls_with_gradients_are_direct(s1, s2) -> None:
    """Gradients make the rule choose torch's own call at every size: the direct call
    takes it, with gradients; without grad mode the layout rules decide again."""
    from portops._ops.vecdot import PLANS

    a, b = torch.randn(s1, requires_grad=True), torch.randn(s2)
    portops.vecdot(torch.ones(2, 2), torch.ones(2, 2))  # a torch CPU call was planned
    direct = PLANS.direct[torch.Tensor]
    got = direct(a, b)
    assert got is not None and got.requires_grad
    assert portops.explain("vecdot", a, b).strategy == "native"
    torch.testing.assert_close(got, torch.linalg.vecdot(a, b))
    with torch.no_grad():
        strategy = portops.explain("vecdot", a, b).strategy
        assert (direct(a, b) is not None) == (strategy == "native")


STRIDED_LAYOUTS = [
    ((4096, 2), "transposed"),
    ((16, 1024), "transposed"),
    ((16, 4096), "transposed"),
    ((256, 128), "transposed"),
    ((4096, 16), "transposed"),
    ((65536, 2), "transposed"),
    ((1 << 16, 16), "transposed"),
    ((1 << 18, 2), "transposed"),
    ((64, 600), "every other"),
    ((4096, 4), "one transposed"),
    ((1, 40000), "transposed"),
    ((4096, 16), "contiguous"),
    ((1 << 15, 16), "contiguous"),
    ((4096, 8), "contiguous"),
    ((8192, 4), "contiguous"),
    ((1024, 64), "contiguous"),
]
PROFILES = [
    {"cores": 2, "l2": 2 << 20},
    {"cores": 1, "l2": 1 << 20},
    {"cores": 64, "l2": 2 << 20},
    {"cores": 2, "l2": 1 << 15},
]


def _strided(shape, layout, dtype):
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn(shape[0], 2 * shape[1], generator=gen, dtype=dtype)
    t = torch.randn(shape[::-1], generator=gen, dtype=dtype).T
    if layout == "every other":
        return wide[:, ::2], wide[:, 1::2]
    if layout == "one transposed":
        return t, wide[:, : shape[1]]
    if layout == "contiguous":
        return wide[:, : shape[1]].contiguous(), wide[:, shape[1] :].contiguous()
    return t, torch.randn(shape[::-1], generator=gen, dtype=dtype).T


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("threads", [1, 2, 8])
def test_strided_direct_calls_are_the_rules_choice(profile, threads, monkeypatch) -> None:
    """A direct call runs what the rule chooses; strided vectors take it exactly where the
    rule sends them to torch's own call (up to a core's L2 of vectors, where the direct
    call leaves the choice to the full path): on 1, 2, 8 threads and machines from one
    core to 64, and small L2s."""
    from portops._backends.torch import vecdot as torch_vecdot

    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    taken = []
    with portops.machine(**profile):
        direct = torch_vecdot._direct()
        for shape, layout in STRIDED_LAYOUTS:
            for dtype in (torch.float32, torch.float64):
                a, b = _strided(shape, layout, dtype)
                got = direct(a, b)
                chosen = portops.explain("vecdot", a, b).strategy
                vectors_bytes = a.numel() // shape[1] * a.element_size()
                if (a.stride(-1) != 1 or b.stride(-1) != 1) and vectors_bytes < profile["l2"]:
                    # strided, vectors within a core's L2: all that the rule sends to native
                    assert (got is not None) == (chosen == "native"), (shape, layout, dtype)
                if got is not None:
                    taken.append((shape, layout, dtype))
                    assert chosen == "native", (shape, layout, dtype)
                    torch.testing.assert_close(got, torch.linalg.vecdot(a, b))
    if profile["l2"] == 2 << 20 and threads < 8:  # the sweep's strided points on 1-2 cores
        for shape in [(4096, 2), (256, 128), (4096, 16)]:
            assert (shape, "transposed", torch.float32) in taken
    if profile["l2"] == 2 << 20 and threads == 2:  # contiguous rows for einsum's loop ...
        assert ((4096, 16), "contiguous", torch.float32) in taken
        assert ((8192, 4), "contiguous", torch.float32) not in taken  # ... not by column


def test_direct_calls_end_with_a_registration_and_a_preference() -> None:
    """A new implementation for torch, or a prefer() block, is obeyed by small calls."""
    from portops import extend as pe

    a, b = torch.ones(3, 4), torch.ones(3, 4)
    portops.vecdot(a, b)
    calls = []

    def spy(args):
        calls.append(args)
        return torch.zeros(3)

    with pe.registered("vecdot", "spy", spy, libraries=["torch"], priority=10**6):
        assert portops.vecdot(a, b).tolist() == [0.0] * 3 and len(calls) == 1
    assert portops.vecdot(a, b).tolist() == [4.0] * 3
    with pe.registered("vecdot", "low", spy, libraries=["torch"], priority=-(10**6)):
        assert portops.vecdot(a, b).tolist() == [4.0] * 3 and len(calls) == 1
        with portops.prefer(vecdot="low"):
            assert portops.vecdot(a, b).tolist() == [0.0] * 3 and len(calls) == 2


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


@pytest.mark.parametrize("device", DEVICES)
def test_complex32_is_summed_in_complex64(device) -> None:
    """torch has no complex32 sum on the CPU: the conjugated products sum in complex64."""
    gen = torch.Generator().manual_seed(1)
    a, b = (torch.randn(4, 30, dtype=torch.complex64, generator=gen) for _ in range(2))
    x1, x2 = a.to(device, torch.complex32), b.to(device, torch.complex32)
    got = portops.vecdot(x1, x2)
    assert got.dtype == torch.complex32
    want = torch.linalg.vecdot(x1.to(torch.complex128), x2.to(torch.complex128))
    torch.testing.assert_close(got.to(torch.complex128), want, rtol=2e-3, atol=2e-2)


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
