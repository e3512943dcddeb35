"""vecdot's strategies on NumPy and torch CPU: which one the rules choose (on fixed
machine profiles), that each gives the reference result where it applies, on the
first call (which plans) and on later ones with new values (which reuse the plan),
and the private BLAS row dots' capability check with its public fallback."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portops
from portops._ops import vecdot as vecdot_module

torch = pytest.importorskip("torch")
torch_vecdot = pytest.importorskip("portops._backends.torch.vecdot")


def _layout(gen, rows: int, n: int, layout: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    if layout == "transposed":
        a, b = (gen.standard_normal((n, rows)).astype(dtype).T for _ in range(2))
    elif layout == "contiguous":
        a, b = (gen.standard_normal((rows, n)).astype(dtype) for _ in range(2))
    elif layout == "broadcast":
        a, b = gen.standard_normal((rows, n)).astype(dtype), gen.standard_normal(n).astype(dtype)
    elif layout == "broadcast-transposed":  # a Fortran-ordered matrix
        a, b = gen.standard_normal((n, rows)).astype(dtype).T, gen.standard_normal(n).astype(dtype)
    elif layout == "broadcast-strided":  # every other row: neither C nor F order
        a = gen.standard_normal((2 * rows, n)).astype(dtype)[::2]
        b = gen.standard_normal(n).astype(dtype)
    else:  # the single vector first
        a, b = gen.standard_normal(n).astype(dtype), gen.standard_normal((rows, n)).astype(dtype)
    if np.dtype(dtype).kind == "c":  # complex, with the same layout
        v = (a + 1j * gen.standard_normal(a.shape)).astype(dtype)
        if layout in ("transposed", "broadcast-transposed"):
            v = v.T.copy().T
        elif layout == "broadcast-strided":
            base = np.zeros((2 * rows, n), dtype)
            base[::2] = v
            v = base[::2]
        a = v
    return a.astype(dtype, copy=False), b


def _expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.conj(a.astype(np.complex128)) * b).sum(-1)


# Sizes that reach each strategy: tiny, a single vector, short contiguous vectors, long
# ones past the caches, strided ones, short contiguous ones past the caches.
SHAPES = [
    (1, 3),
    (16, 16),
    (7, 300),
    (300, 2),
    (4096, 2),
    (600, 1024),
    (1, 4096),
    (3, 1),
    (40000, 16),
    (40, 16),
    (16, 100),
    (500, 4),
]
LAYOUTS = [
    "contiguous",
    "transposed",
    "broadcast",
    "broadcast-transposed",
    "broadcast-strided",
    "vector-first",
]


@pytest.fixture(autouse=True)
def fresh_plans():
    vecdot_module.PLANS.clear()
    yield
    vecdot_module.PLANS.clear()


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("rows", "n"), SHAPES)
def test_plans_match_the_reference(library, dtype, layout, rows, n) -> None:
    gen = np.random.default_rng(rows * n)
    for call in range(3):  # the first call plans, the others reuse the plan
        a, b = _layout(gen, rows, n, layout, dtype)
        want = _expected(a, b)
        x1, x2 = (a, b) if library == "numpy" else (torch.from_numpy(a), torch.from_numpy(b))
        got = portops.vecdot(x1, x2)
        assert type(got) is type(x1)
        assert tuple(got.shape) == want.shape
        got_np = np.asarray(got) if library == "numpy" else got.numpy()
        assert got_np.dtype == np.dtype(dtype)
        tol = 1e-4 if np.dtype(dtype).itemsize <= 8 and dtype is not np.float64 else 1e-10
        np.testing.assert_allclose(got_np, want, rtol=tol, atol=tol * np.sqrt(n))
        assert len(vecdot_module.PLANS) == 1, f"call {call} planned again"


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_a_process_keys_its_first_and_later_calls_alike(library) -> None:
    make = "torch.ones(3, 4)" if library == "torch" else "numpy.ones((3, 4))"
    code = (
        f"import numpy, torch, portops; from portops._ops import vecdot as v; a = {make}; "
        "[portops.vecdot(a, a) for _ in range(3)]; print(len(v.PLANS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_tensor_subclasses_are_planned() -> None:
    p = torch.nn.Parameter(torch.ones(3, 4), requires_grad=False)
    for _ in range(3):
        assert portops.vecdot(p, p).tolist() == [4.0] * 3
    assert len(vecdot_module.PLANS) == 1


def test_no_tensor_plan_while_tracing_or_preferring(monkeypatch) -> None:
    """A tensor call's plan is skipped while torch traces and inside portops.prefer;
    otherwise the plan runs."""
    from portops import _torch_state

    a, b = torch.ones(16, 3000), torch.full((16, 3000), 2.0)  # past the direct calls
    vecdot_module.PLANS.clear()
    portops.vecdot(a, b)
    (key,) = vecdot_module.PLANS._plans

    def sentinel(x1, x2):
        raise AssertionError("the plan ran")

    vecdot_module.PLANS._plans[key] = sentinel
    with pytest.raises(AssertionError, match="the plan ran"):
        portops.vecdot(a, b)
    with portops.prefer(vecdot="generic"):
        assert portops.vecdot(a, b).tolist() == [6000.0] * 16
    monkeypatch.setattr(_torch_state, "_is_compiling", lambda: True)
    assert portops.vecdot(a, b).tolist() == [6000.0] * 16


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize(("axis", "keepdims"), [(-2, False), (-1, True), (0, True)])
def test_plans_with_other_axes_and_keepdims(library, axis, keepdims) -> None:
    gen = np.random.default_rng(1)
    for _ in range(2):
        a, b = (gen.standard_normal((5, 40, 3)).astype(np.float32) for _ in range(2))
        want = np.sum(a.astype(np.float64) * b, axis=axis, keepdims=keepdims)
        x1, x2 = (a, b) if library == "numpy" else (torch.from_numpy(a), torch.from_numpy(b))
        got = portops.vecdot(x1, x2, axis=axis, keepdims=keepdims)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.fixture
def two_threads():
    """torch with two threads, as on the profile below (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


# A 2-core machine with 512 KiB of L2 per core and a 2 MiB L3 shared by both.
SMALL_CACHES = {"cores": 2, "l2": 1 << 19, "l3": 1 << 21, "l3_shared_by": 2}


def _strategy(x1, x2) -> str:
    return portops.explain("vecdot", x1, x2).strategy


def test_torch_choice_on_a_fixed_machine(two_threads) -> None:
    """What the rules choose for torch CPU tensors on the profile above."""
    cases = {
        ((4, 8), (4, 8)): "native",  # tiny: the views cost more than they save
        ((4, 8), (8,)): "mv",  # one vector against many: torch's GEMV
        ((4096, 64), (64,)): "mv",
        ((2, 4096, 64), (64,)): "mv",
        ((1 << 17, 2), (1 << 17, 2)): "numpy",  # short contiguous vectors: einsum's loop
        ((1 << 12, 16), (1 << 12, 16)): "native",  # within the cores' L2: torch's threads
        ((1 << 15, 16), (1 << 15, 16)): "bmm",  # past it: threaded batched GEMM
        ((1 << 15, 64), (1 << 15, 64)): "numpy",  # np.vecdot's length
        ((1024, 1024), (1024, 1024)): "row_dots",  # long vectors: a BLAS dot each, threaded
        ((16, 2048), (16, 2048)): "row_dots",  # ... also within one core's L2
        ((256, 128), (256, 128)): "row_dots",  # ... from 512-byte vectors
        ((512, 96), (512, 96)): "numpy",  # shorter: NumPy's single pass
        ((64, 256), (64, 256)): "native",  # below torch's grain: one thread, no views
        ((4096, 4), (4096, 4)): "numpy",  # ... but rows of 16 bytes: NumPy's columns
        ((16, 256), (16, 256)): "native",  # below views_min elements
    }
    with portops.machine(**SMALL_CACHES):
        for (s1, s2), want in cases.items():
            assert _strategy(torch.ones(s1), torch.ones(s2)) == want, (s1, s2)
        strided = torch.ones(2, 1 << 17).T  # columns past a core's L2: by column
        assert _strategy(strided, strided) == "columns"
        strided = torch.ones(2, 1 << 18)[:, ::2].T  # strided columns: NumPy's einsum
        assert _strategy(strided, strided) == "numpy"
        strided = torch.ones(16, 1 << 15).T  # strided rows: NumPy's einsum, not bmm
        assert _strategy(strided, strided) == "numpy"
        torch.set_num_threads(1)  # one thread: NumPy's loop, as fast (restored after)
        assert _strategy(torch.ones(1 << 15, 16), torch.ones(1 << 15, 16)) == "numpy"
        assert _strategy(torch.ones(500, 500), torch.ones(500, 500)) == "numpy"
        strided = torch.ones(64, 1024).T  # strided rows of 256 bytes in the L2s: torch's
        assert _strategy(strided, strided) == "native"
        strided = torch.ones(2, 1 << 15).T  # ... of 8 bytes: NumPy's loop across them
        assert _strategy(strided, strided) == "numpy"
        torch.set_num_threads(2)
        x = torch.ones(500, 500, requires_grad=True)
        assert _strategy(x, x) == "native"  # gradients: torch's own calls
        with torch.no_grad():
            assert _strategy(x, x) == "row_dots"


def test_many_threads_take_torchs_own_call(monkeypatch) -> None:
    """With many torch threads, a memory-bound input takes torch's threaded product and
    sum (three times the traffic of NumPy's single pass, on every thread)."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 64)
    with portops.machine(cores=64, l2=2 << 20, l3=64 << 20):
        x = torch.ones(1 << 20, 64)
        assert portops.explain("vecdot", x, x).strategy == "native"
        assert portops.explain("vecdot", x, x).threads == 64


def test_numpy_choice_on_a_fixed_machine() -> None:
    def strategy(shape, transposed=False, dtype=np.float32, other=None):
        a = np.ones(shape[::-1], dtype).T if transposed else np.ones(shape, dtype)
        return portops.explain("vecdot", a, a if other is None else other).strategy

    with portops.machine(**SMALL_CACHES):  # the cache: 2 x 512 KiB L2s or 2 MiB L3
        assert strategy((4096, 4)) == "columns"  # 16 bytes a row
        assert strategy((4096, 5)) == "einsum"
        assert strategy((1 << 17, 4)) == "einsum"  # past half the cache: four passes lose
        assert strategy((1 << 17, 2)) == "columns"  # two still win
        assert strategy((16, 16)) == "vecdot"  # few vectors
        assert strategy((64, 16)) == "einsum"
        assert strategy((256, 64)) == "vecdot"  # long vectors
        assert strategy((16, 1024), transposed=True) == "einsum"  # strided
        assert strategy((64, 64), other=np.ones(64, np.float32)) == "matvec"
        assert strategy((4096, 64), other=np.ones(64, np.float32)) == "matvec"
        assert strategy((2, 1, 64), other=np.ones((3, 64), np.float32)) == "gemm"


@pytest.mark.parametrize(("rows", "n"), [(70001, 3), (1000, 1000), (3, 40000)])
@pytest.mark.parametrize("vector_first", [False, True])
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_large_matrix_vector(rows, n, vector_first, library) -> None:
    gen = np.random.default_rng(rows)
    for _ in range(3):
        a = gen.standard_normal((rows, n)).astype(np.float32)
        b = gen.standard_normal(n).astype(np.float32)
        want = a.astype(np.float64) @ b
        x1, x2 = (b, a) if vector_first else (a, b)
        if library == "torch":
            x1, x2 = torch.from_numpy(x1), torch.from_numpy(x2)
        got = np.asarray(portops.vecdot(x1, x2))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.sqrt(n))


# -- the BLAS row dots: a private operator behind a capability check ---------------------


def test_the_row_dots_operator_exists() -> None:
    """The private operator is in the installed torch (where a future torch drops it,
    the strategy is never chosen, and this test says so)."""
    assert torch_vecdot._ROW_DOTS is not None


def test_without_the_operator_other_strategies_serve(monkeypatch, two_threads) -> None:
    monkeypatch.setattr(torch_vecdot, "_ROW_DOTS", None)
    x = torch.randn(1024, 1024)
    with portops.machine(**SMALL_CACHES):
        assert _strategy(x, x) != "row_dots"
        torch.testing.assert_close(portops.vecdot(x, x), torch.linalg.vecdot(x, x))
    with pytest.raises(ValueError, match="does not apply"):
        with portops.prefer(vecdot="torch_cpu/row_dots"):
            portops.vecdot(x, x)


def test_row_dots_not_for_layouts_it_cannot_serve(two_threads) -> None:
    x = torch.ones(500, 500)
    unmergeable = torch.ones(128, 4, 512).transpose(0, 1)  # (4, 128, 512), rows apart
    for a, b in [(x.T, x.T), (x, x[0]), (x.half(), x.half()), (unmergeable, unmergeable)]:
        with pytest.raises(ValueError, match="does not apply"):
            with portops.prefer(vecdot="torch_cpu/row_dots"):
                portops.vecdot(a, b)


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    n=st.integers(1, 40),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    keepdims=st.booleans(),
    double=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_dots_match_the_reference(lead, n, pads, keepdims, double, seed) -> None:
    """Forced, the row dots give a float64 reference's result on every shape they apply
    to, on the first call and the second; rows padded apart in memory too."""
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float64 if double else torch.float32
    for _ in range(2):
        wide = [torch.randn(*lead, n + p, generator=gen, dtype=dtype) for p in pads]
        x1, x2 = (w[..., :n] for w in wide)
        before = [w.clone() for w in wide]
        with portops.prefer(vecdot="torch_cpu/row_dots"):
            got = portops.vecdot(x1, x2, keepdims=keepdims)
        want = torch.sum(x1.double() * x2.double(), dim=-1, keepdim=keepdims)
        assert got.dtype == dtype and got.shape == want.shape
        tol = 1e-10 if double else 1e-4
        np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=tol, atol=tol * n)
        for w, b in zip(wide, before, strict=True):
            assert torch.equal(w, b)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 34),
    rest=st.lists(st.integers(1, 40), min_size=1, max_size=2),
    position=st.integers(0, 2),
    keepdims=st.booleans(),
    double=st.booleans(),
    negative=st.booleans(),
)
def test_columns_strategy(n, rest, position, keepdims, double, negative) -> None:
    """Vectors along a strided axis, summed column by column: chosen where each column
    holds a core's L2 (here 256 bytes) in an input that is not tiny, and the reference
    result for every axis, keepdims and real dtype, chosen or forced."""
    dtype = torch.float64 if double else torch.float32
    axis = min(position, len(rest))
    gen = torch.Generator().manual_seed(n)
    base = torch.randn(2, n, *rest, dtype=dtype, generator=gen)
    x1, x2 = (b.movedim(0, axis) for b in base)  # slices along `axis` are contiguous
    before = base.clone()
    call_axis = axis - x1.ndim if negative else axis
    want = torch.sum(x1.double() * x2.double(), dim=call_axis, keepdim=keepdims)
    with portops.machine(l2=256):
        chosen = portops.explain("vecdot", x1, x2, axis=call_axis, keepdims=keepdims).strategy
        columns = n <= 32 and math.prod(rest) * x1.element_size() >= 256
        columns = columns and x1.numel() >= 8192  # else torch's own call: tiny
        short = n * x1.element_size() <= 16  # or, below torch's grain, rows this short
        columns = columns and (x1.numel() >= 32768 or short)
        assert (chosen == "columns") == columns
        for forced in (None, "torch_cpu/columns"):
            for _ in range(2):
                with portops.prefer(vecdot=forced) if forced else _nothing():
                    got = portops.vecdot(x1, x2, axis=call_axis, keepdims=keepdims)
                assert got.dtype == dtype and got.shape == want.shape
                torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * n)
    assert base.equal(before)  # inputs untouched (x1 and x2 are views of base)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


@settings(max_examples=60, deadline=None)
@given(
    strategy=st.sampled_from(["vecdot", "einsum"]),
    rows=st.integers(2, 2100),
    rest=st.lists(st.integers(1, 5), max_size=1),
    n=st.integers(1, 9),
    dtype=st.sampled_from([np.float32, np.float64, np.int32]),
    keepdims=st.booleans(),
    library=st.sampled_from(["numpy", "torch"]),
    middle=st.booleans(),
)
def test_threaded_blocks_match_the_reference(
    strategy, rows, rest, n, dtype, keepdims, library, middle
) -> None:
    """With one thread per byte, np.vecdot and einsum run over blocks of the first axis
    on two threads (np.vecdot only with over 500 vectors per block: its loop holds the GIL
    below that), and give the reference's result, on NumPy arrays and torch's views."""
    from portops import _tuning

    gen = np.random.default_rng(rows * n)
    shape, axis = ((rows, n, *rest), 1) if middle and rest else ((rows, *rest, n), -1)
    a, b = (gen.integers(-9, 9, shape).astype(dtype) for _ in range(2))
    want = np.sum(a.astype(np.float64) * b, axis=axis, keepdims=keepdims)
    x1, x2 = (a, b) if library == "numpy" else (torch.from_numpy(a), torch.from_numpy(b))
    impl = "numpy" if library == "numpy" else "torch_cpu"
    vectors = rows * math.prod(rest)
    expected = 2 if strategy == "einsum" or vectors // 501 >= 2 else 1
    with portops.threads(2), _tuning.overridden({"numpy.thread_grain": 1}):
        if library == "torch":  # the torch strategy reports NumPy's kernel's threads
            with portops.prefer(vecdot="numpy/" + strategy):
                np_threads = portops.explain("vecdot", a, b, axis=axis, keepdims=keepdims).threads
            assert np_threads == expected
        with portops.prefer(vecdot=f"{impl}/{'numpy' if library == 'torch' else strategy}"):
            report = portops.explain("vecdot", x1, x2, axis=axis, keepdims=keepdims)
            got = portops.vecdot(x1, x2, axis=axis, keepdims=keepdims)
    if library == "numpy":
        assert report.threads == expected
    got_np = np.asarray(got) if library == "numpy" else got.numpy()
    assert got_np.dtype == np.dtype(dtype) and got_np.shape == want.shape
    np.testing.assert_array_equal(got_np, want.astype(dtype))
    assert not np.shares_memory(got_np, a) and not np.shares_memory(got_np, b)
