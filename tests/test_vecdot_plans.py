"""vecdot's call plans on NumPy and torch CPU: every kind of plan (one native call, a
matrix-vector product, NumPy's kernels on views) gives the reference result, on the
first call (which plans) and on later ones with new values (which reuse the plan)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portops
from portops._backends.numpy import vecdot as numpy_vecdot
from portops._ops import vecdot as vecdot_module

torch = pytest.importorskip("torch")
torch_vecdot = pytest.importorskip("portops._backends.torch.vecdot")
row_dots = pytest.importorskip("portops._backends.torch.row_dots")


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


# Sizes that reach each plan: tiny (torch's own call), a single vector (matmul; NumPy's
# kernels past the caches for short vectors), short contiguous vectors (einsum in
# Fortran order), long ones past the caches (np.vecdot), strided ones (einsum; np.vecdot
# for a few short ones), short contiguous ones past the caches (a batched matrix
# product on torch).
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
def test_a_process_first_call_keys_its_plan_as_later_calls_do(library) -> None:
    """The first call of a process learns the array type (the generic signature keys
    it); later ones build the key inline. Both must be the same key: one plan."""
    import subprocess
    import sys

    make = "torch.ones(3, 4)" if library == "torch" else "numpy.ones((3, 4))"
    code = (
        f"import numpy, torch, portops; from portops._ops import vecdot as v; a = {make}; "
        "[portops.vecdot(a, a) for _ in range(3)]; print(len(v.PLANS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_tensor_subclasses_share_the_plain_tensors_plan() -> None:
    """A Parameter pair (a Tensor subclass, keyed by _plans.pair_signature) gets the
    key a plain tensor pair of the same layout gets inline: one plan for both."""
    a = torch.ones(3, 4)
    p = torch.nn.Parameter(torch.ones(3, 4), requires_grad=False)
    for x in (a, a, p, p):
        assert portops.vecdot(x, x).tolist() == [4.0] * 3
    assert len(vecdot_module.PLANS) == 1


def test_no_tensor_plan_while_tracing_or_preferring(monkeypatch) -> None:
    """A tensor call's plan is skipped while torch.export's non-strict tracing runs (its
    flag set) and inside portops.prefer; otherwise the plan runs."""
    a, b = torch.ones(4, 3), torch.full((4, 3), 2.0)
    portops.vecdot(a, b)
    (key,) = vecdot_module.PLANS._plans

    def sentinel(x1, x2):
        raise AssertionError("the plan ran")

    vecdot_module.PLANS._plans[key] = sentinel
    with pytest.raises(AssertionError, match="the plan ran"):
        portops.vecdot(a, b)
    with portops.prefer(vecdot="generic"):
        assert portops.vecdot(a, b).tolist() == [6.0] * 4
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    assert portops.vecdot(a, b).tolist() == [6.0] * 4


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


def test_which_plan(monkeypatch) -> None:
    """The selection on fixed cache and thread figures: torch's own call for tiny
    inputs, a matrix-vector product for a single vector, a batched product for short
    contiguous vectors past the caches, one BLAS dot per long vector past a core's
    L2, NumPy's kernels where they read less."""
    monkeypatch.setattr(torch_vecdot, "CACHE_BYTES", 1 << 20)
    monkeypatch.setattr(torch_vecdot, "LLC_BYTES", 1 << 21)
    monkeypatch.setattr(torch_vecdot, "L2_BYTES", 1 << 19)
    monkeypatch.setattr(torch_vecdot, "_mul_sum_wins", lambda *args: False)
    monkeypatch.setattr(torch_vecdot, "mkl_off_intel", lambda: False)
    monkeypatch.setattr(row_dots, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    cases = {
        ((4, 8), (4, 8)): torch.linalg.vecdot,
        ((4, 8), (8,)): torch.mv,
        ((1024, 32), (32,)): torch.mv,
        ((4096, 64), (64,)): torch.mv,
        ((2, 4096, 64), (64,)): torch.matmul,
        ((1 << 18, 2), (2,)): None,  # short vectors past the caches: NumPy
        ((1 << 17, 2), (1 << 17, 2)): None,  # einsum in Fortran order
        ((1 << 15, 16), (1 << 15, 16)): torch_vecdot._bmm,  # short, past the caches
        ((1 << 13, 16), (1 << 13, 16)): torch.linalg.vecdot,  # short, in the L3
        ((1 << 14, 8), (1 << 14, 8)): torch_vecdot._bmm,  # under a line, half the L3
        ((1 << 13, 8), (1 << 13, 8)): torch.linalg.vecdot,  # under a line, in the L2s
        ((1 << 17, 2), (2,)): torch.mv,  # short vectors in the L3
        ((1024, 16), (1024, 16)): torch.linalg.vecdot,  # short, in the caches
        ((1024, 1024), (1024, 1024)): "row_dots",  # one BLAS dot per vector, threads
        ((500, 500), (500, 500)): "row_dots",
        ((2048, 128), (2048, 128)): None,  # 512-byte vectors: np.vecdot reads once
        ((128, 512), (128, 512)): torch.linalg.vecdot,  # past one core's L2: torch's threads
        ((64, 256), (64, 256)): None,  # in one core's L2: np.vecdot
        ((16, 256), (16, 256)): torch.linalg.vecdot,  # the views cost more than they save
        ((64, 64), (64, 64)): torch.linalg.vecdot,
    }
    from array_api_compat import torch as xp  # the records' namespace

    def plan_of(x1, x2):
        return torch_vecdot._plan_cpu(vecdot_module.VecdotArgs.make(x1, x2, -1, False, xp))

    for (s1, s2), want in cases.items():
        plan = plan_of(torch.ones(s1), torch.ones(s2))
        if want is None:
            assert plan not in (torch.linalg.vecdot, torch.matmul, torch.mv), (s1, s2)
            assert "row_dots" not in getattr(plan, "__qualname__", ""), (s1, s2)
        elif want == "row_dots":
            assert plan.__qualname__.startswith("row_dots_plan."), (s1, s2)
        else:
            assert plan is want, (s1, s2)
    strided = torch.ones(64, 128).T  # few elements: torch's own call
    assert plan_of(strided, strided) is torch.linalg.vecdot
    strided = torch.ones(64, 1024).T  # NumPy's einsum reads each input once
    assert plan_of(strided, strided) is not torch.linalg.vecdot
    strided = torch.ones(4096, 16).T  # few vectors: einsum's inner loop is short
    assert plan_of(strided, strided) is torch.linalg.vecdot
    strided = torch.ones(2, 1 << 17).T  # columns of a core's L2: summed column by column
    assert plan_of(strided, strided).__qualname__ == "_columns.<locals>.columns"
    strided = torch.ones(2, 1 << 18)[:, ::2].T  # the same, but strided columns: torch's
    assert plan_of(strided, strided) is torch.linalg.vecdot
    strided = torch.ones(33, 1 << 17).T  # more columns than COLUMNS_MAX
    assert "columns" not in plan_of(strided, strided).__qualname__
    strided = torch.ones(128, 1024).T  # past the L2s, in the L3: torch's threads
    assert plan_of(strided, strided) is torch.linalg.vecdot
    strided = torch.ones(512, 1024).T  # past the L3: NumPy's single pass
    assert plan_of(strided, strided) is not torch.linalg.vecdot


def test_numpy_kernels(monkeypatch) -> None:
    """np.vecdot for few vectors (strided ones only when few and short), einsum for
    many short ones (in Fortran order when each is at most F_ORDER_BYTES, and past
    half the LLC only for two elements), np.vecdot for long unit-stride ones."""
    monkeypatch.setattr(numpy_vecdot, "SPILL_BYTES", 1 << 20)

    def kernel(shape: tuple[int, int], transposed: bool = False, dtype=np.float32) -> str:
        a = np.ones(shape[::-1], dtype).T if transposed else np.ones(shape, dtype)
        return numpy_vecdot._kernel(a, a, -1)

    assert kernel((4096, 4)) == "einsum_f"  # 16 bytes, 128 KiB in all
    assert kernel((4096, 5)) == "einsum"
    assert kernel((1 << 17, 4)) == "einsum"  # past half the LLC: four passes lose
    assert kernel((1 << 17, 2)) == "einsum_f"  # two still win
    assert kernel((1 << 17, 2), dtype=np.float64) == "einsum_f"
    assert kernel((4096, 3), dtype=np.float64) == "einsum"

    assert kernel((16, 16)) == "vecdot"
    assert kernel((32, 8)) == "vecdot"
    assert kernel((64, 16)) == "einsum"
    a = np.ones((64, 16))  # double precision: np.vecdot up to more vectors
    assert numpy_vecdot._kernel(a, a, -1) == "vecdot"
    assert kernel((64, 2)) == "einsum_f"
    assert kernel((256, 64)) == "vecdot"
    assert kernel((16, 100), transposed=True) == "vecdot"
    assert kernel((16, 1024), transposed=True) == "einsum"
    assert kernel((256, 2), transposed=True) == "einsum"


def test_numpy_direct_plans() -> None:
    a = np.ones((64, 64), np.float32)
    assert numpy_vecdot._direct(a, a) is np.vecdot
    # One single vector: a matrix-vector product at every size, ndarray.dot where the
    # matrix is contiguous either way.
    assert numpy_vecdot._direct(a, a[0]) is numpy_vecdot._dot
    assert numpy_vecdot._direct(a[0], a) is numpy_vecdot._dot_swapped
    assert numpy_vecdot._direct(a.T, a[0]) is numpy_vecdot._dot
    assert numpy_vecdot._direct(a[::2], a[0]) is np.matmul
    big = np.ones((1 << 16, 16), np.float32)  # 4 MiB: BLAS threads its GEMV
    assert numpy_vecdot._direct(big, big[0]) is np.matmul
    assert numpy_vecdot._direct(big[0], big) is numpy_vecdot._matmul_swapped
    assert numpy_vecdot._direct(big.T.copy().T, big[0]) is numpy_vecdot._dot  # F order


@pytest.mark.parametrize(("rows", "n"), [(70001, 3), (1000, 1000), (3, 40000)])
@pytest.mark.parametrize("vector_first", [False, True])
def test_large_matvec(rows, n, vector_first) -> None:
    """One vector against a large matrix: np.matmul's GEMV, on the first call and on
    reuse, either argument order."""
    gen = np.random.default_rng(rows)
    for _ in range(3):
        a = gen.standard_normal((rows, n)).astype(np.float32)
        b = gen.standard_normal(n).astype(np.float32)
        want = a.astype(np.float64) @ b
        x1, x2 = (b, a) if vector_first else (a, b)
        got = portops.vecdot(x1, x2)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-3 * np.sqrt(n))
        (plan,) = vecdot_module.PLANS._plans.values()
        assert plan in (np.matmul, numpy_vecdot._matmul_swapped)
    assert numpy_vecdot._direct(a.astype(np.float16), a.astype(np.float16)) is None


@pytest.mark.parametrize("slow", [False, True], ids=["torch-gemv", "slow-torch-gemv"])
@pytest.mark.parametrize("swapped", [False, True], ids=["matrix-first", "vector-first"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_matrix_vector_plans_on_either_gemv(monkeypatch, slow, swapped, order) -> None:
    """A matrix and a single vector: torch.mv, or np.vecdot on views for long rows
    where torch's GEMV is slow (MKL on another vendor's CPU), give the reference over
    repeated calls (the remembered views), the matrix in either memory order, either
    argument first; short rows, small matrices and strided rows stay with torch."""
    from array_api_compat import torch as xp  # the records' namespace

    monkeypatch.setattr(torch_vecdot, "mkl_off_intel", lambda: slow)
    monkeypatch.setattr(torch_vecdot, "L2_BYTES", 1 << 14)
    gen = np.random.default_rng(3)
    n = torch_vecdot.MATVEC_LONG
    m = np.asarray(gen.standard_normal((40, n)), order=order)
    v = gen.standard_normal(n)
    for dtype in (np.float32, np.float64):
        tm, tv = torch.from_numpy(m.astype(dtype)), torch.from_numpy(v.astype(dtype))
        x1, x2 = (tv, tm) if swapped else (tm, tv)
        want = m.astype(np.float64) @ v.astype(dtype)
        plan = torch_vecdot._plan_cpu(vecdot_module.VecdotArgs.make(x1, x2, -1, False, xp))
        assert ("numpy_vecdot_plan" in plan.__qualname__) == (slow and order == "C")
        for _ in range(3):
            got = portops.vecdot(x1, x2)
            assert got.dtype == tm.dtype and got.shape == (40,)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    for small in (torch.ones(40, n - 1), torch.ones(4, n)):  # short rows, a small matrix
        plan = torch_vecdot._plan_cpu(vecdot_module.VecdotArgs.make(small, small[0], -1, False, xp))
        assert plan is torch.mv


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, torch_vecdot.COLUMNS_MAX + 2),
    rest=st.lists(st.integers(1, 40), min_size=1, max_size=2),
    position=st.integers(0, 2),
    keepdims=st.booleans(),
    double=st.booleans(),
    negative=st.booleans(),
)
def test_columns_plan(n, rest, position, keepdims, double, negative) -> None:
    """Vectors along a strided axis whose slices are contiguous: the column-by-column
    plan where they are short enough and each slice holds at least a core's L2 (here
    256 bytes) in an input that is not tiny, with the reference result for every
    axis, keepdims and real dtype, on the planning call and on reuse."""
    from array_api_compat import torch as xp  # the records' namespace

    vecdot_module.PLANS.clear()
    dtype = torch.float64 if double else torch.float32
    axis = min(position, len(rest))
    gen = torch.Generator().manual_seed(n)
    base = torch.randn(2, n, *rest, dtype=dtype, generator=gen)
    x1, x2 = (b.movedim(0, axis) for b in base)  # slices along `axis` are contiguous
    before = base.clone()
    call_axis = axis - x1.ndim if negative else axis
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_vecdot, "L2_BYTES", 256)
        args = vecdot_module.VecdotArgs.make(x1, x2, call_axis, keepdims, xp)
        planned = torch_vecdot._plan_cpu(args)
        columns = (
            n <= torch_vecdot.COLUMNS_MAX
            and math.prod(rest) * x1.element_size() >= 256
            and x1.numel() >= torch_vecdot.NATIVE_SMALL  # else torch's own call: tiny
        )
        assert ("_columns" in planned.__qualname__) == columns
        want = torch.sum(x1.double() * x2.double(), dim=call_axis, keepdim=keepdims)
        for _ in range(2):
            got = portops.vecdot(x1, x2, axis=call_axis, keepdims=keepdims)
            assert got.dtype == dtype and got.shape == want.shape
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * n)
    assert base.equal(before)  # inputs untouched (x1 and x2 are views of base)
