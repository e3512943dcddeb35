"""The straight-line programs einsum runs for a repeated signature on NumPy and torch
(portops._einsum.program), against numpy.einsum on every case."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from backends import Backend, assert_matches, requested_backends, require
from einsum_cases import CASES, case_id, make_operands, random_cases

import portops
from portops._einsum.program import write_program
from portops._ops.einsum import _lookup

einsum_module = importlib.import_module("portops._ops.einsum")


def _backend_module(library: str) -> Any:
    return importlib.import_module(f"portops._backends.{library}.einsum")


def _program(eq: str, operands: list[Any], library: str = "torch") -> Any:
    """The program of `eq` on these operands (cast to the result dtype), and them."""
    args = _lookup((eq, *operands), "auto", None).args
    module = _backend_module(library)
    if library == "torch":
        operands = [x.to(args.dtype) for x in operands]
    else:
        operands = [x.astype(args.dtype) for x in operands]
    if library == "torch":  # CUDA's GEMMs refuse integers, as in _program_of
        dtype = args.dtype
        native = operands[0].is_cpu or dtype.is_floating_point or dtype.is_complex
    else:
        native = args.dtype.kind in "fc"
    program = write_program(args.plan, args.dtype, module._OPS, module.SPELLING, native_gemm=native)
    assert program is not None
    return program, operands


def _check(backend: Backend, eq: str, arrays: list[np.ndarray]) -> None:
    operands = [backend.asarray(a) for a in arrays]
    program, cast = _program(eq, operands, backend.library)
    got = program.build()(*cast)
    expected = np.einsum(eq, *arrays)
    if backend.library == "numpy" and np.ndim(expected) == 0:
        assert np.isscalar(got), type(got)  # a NumPy scalar, as numpy.einsum gives
    assert_matches(backend, got, np.asarray(expected))


PROGRAM_BACKENDS = [n for n in requested_backends()[0] if Backend(n).library in ("numpy", "torch")]


@pytest.fixture(params=PROGRAM_BACKENDS)
def program_backend(request: pytest.FixtureRequest) -> Backend:
    return require(request.param)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "int64", "bool"])
def test_program_matches_numpy(program_backend: Backend, case: tuple, dtype: str) -> None:
    eq, shapes = case
    _check(program_backend, eq, make_operands(shapes, dtype, np.random.default_rng(31)))


def test_random_equations(program_backend: Backend) -> None:
    rng = np.random.default_rng(32)
    for k, (eq, shapes) in enumerate(random_cases(seed=2025, count=150)):
        dtype = ("float64", "int64", "complex128", "bool")[k % 4]
        arrays = make_operands(shapes, dtype, rng)
        try:
            _check(program_backend, eq, arrays)
        except Exception as exc:
            raise AssertionError(f"{eq!r} {shapes} {dtype}: {exc}") from exc


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("i,i->", ((5,), (5,))),
        ("ij,j->i", ((4, 5), (5,))),
        ("i,ij->j", ((4,), (4, 5))),
        ("i,j->ij", ((4,), (3,))),
        ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
        ("bhid,bhjd->bhij", ((2, 3, 4, 5), (2, 3, 6, 5))),
        ("ij,jk,kl->il", ((3, 4), (4, 5), (5, 2))),
        ("ii->i", ((4, 4),)),
    ],
)
def test_program_gradients(eq: str, shapes: tuple) -> None:
    torch = pytest.importorskip("torch")
    arrays = make_operands(shapes, "float64", np.random.default_rng(33))
    tensors = [torch.from_numpy(a).requires_grad_(True) for a in arrays]
    program, _ = _program(eq, tensors)
    assert torch.autograd.gradcheck(program.build(), tuple(tensors))


@pytest.mark.parametrize(
    "eq, shapes, calls, call",
    [
        ("i,i->", ((7,), (7,)), 1, "torch.dot"),
        ("ij,j->i", ((6, 7), (7,)), 1, "torch.mv"),
        ("i,ij->j", ((6,), (6, 7)), 2, "torch.mv"),  # and a transposed view
        ("i,j->ij", ((6,), (7,)), 1, "torch.outer"),
        ("ij,jk->ik", ((6, 7), (7, 8)), 1, "torch.mm"),
        ("bij,bjk->bik", ((2, 6, 7), (2, 7, 8)), 1, "torch.bmm"),
        ("ij,ij->ij", ((6, 7), (6, 7)), 1, "*"),
    ],
)
def test_narrowest_calls(eq: str, shapes: tuple, calls: int, call: str) -> None:
    """A single GEMM or product is one torch call, on the operands as they are."""
    torch = pytest.importorskip("torch")
    arrays = make_operands(shapes, "float32", np.random.default_rng(34))
    program, _ = _program(eq, [torch.from_numpy(a) for a in arrays])
    assert program.calls == calls
    names = program.build().__code__.co_names
    assert call == "*" or call.split(".")[1] in names


@pytest.mark.parametrize(
    "eq, shapes, name",
    [
        ("ij,jk->ik", ((6, 7), (7, 8)), "dot"),  # one BLAS GEMM, without matmul's set-up
        ("ij,jk,kl->il", ((8, 2), (2, 8), (8, 8)), "dot"),
        ("bij,bjk->bik", ((2, 6, 7), (2, 7, 8)), "_ops"),  # batched: BLAS-ready layouts
    ],
)
def test_numpy_gemm_calls(eq: str, shapes: tuple, name: str) -> None:
    """NumPy's unbatched floating GEMMs are numpy.dot calls; batched ones go through the
    layout check of NumpyOps.matmul."""
    arrays = make_operands(shapes, "float32", np.random.default_rng(36))
    program, operands = _program(eq, arrays, "numpy")
    names = program.build().__code__.co_names
    assert name in names and ("_ops" not in names) == (name == "dot")
    np.testing.assert_allclose(program.build()(*operands), np.einsum(eq, *operands), rtol=1e-5)


def test_repeated_call_runs_the_program() -> None:
    """The second call of a signature runs its program; tiny ones choose it over
    numpy.einsum's loop on views when it is one torch call."""
    torch = pytest.importorskip("torch")
    a, b = torch.rand(6, 7), torch.rand(6, 7)
    portops.einsum("i->", a[0])
    einsum_module.clear_caches()
    first = portops.einsum("ij,ij->ij", a, b)
    assert len(einsum_module.PLANS) == 1
    assert portops.explain("einsum", "ij,ij->ij", a, b).strategy == "lowering"
    args = _lookup(("ij,ij->ij", a, b), "auto", None).args
    assert _backend_module("torch")._program_of(args.plan, args.dtype, "cpu").calls == 1
    torch.testing.assert_close(portops.einsum("ij,ij->ij", a + 1, b), (a + 1) * b)
    torch.testing.assert_close(first, a * b)
    # Longer programs on tiny operands stay with the loop.
    x = torch.rand(2, 3, 2, 4)
    y = torch.rand(2, 5, 2, 4)
    assert portops.explain("einsum", "bind,bjnd->bnij", x, y).strategy == "numpy_loop"


def test_numpy_calls_run_the_program() -> None:
    """On NumPy the lowering's repeated calls run its program, with NumPy's results
    (scalars for 0-d ones); tiny ones stay with numpy.einsum's loop, decided without
    building a plan, so that first calls stay cheap."""
    rng = np.random.default_rng(35)
    a, b = rng.uniform(size=(60, 70)), rng.uniform(size=(60, 70))
    assert portops.explain("einsum", "ij,kj->ik", a, b).strategy == "lowering"
    assert portops.explain("einsum", "ij,kj->ik", a[:2, :2], b[:2, :2]).strategy == "loop"
    for _ in range(3):  # the first call, then the signature's program
        np.testing.assert_allclose(portops.einsum("ij,kj->ik", a, b), a @ b.T)
        got = portops.einsum("i,i->", a[0], b[0])
        assert isinstance(got, np.float64) and np.isclose(got, a[0] @ b[0])
        trace = portops.einsum("ii->", a[:, :60])
        assert isinstance(trace, np.float64) and np.isclose(trace, np.trace(a[:, :60]))


def test_runner_builds_on_the_second_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature called once runs the interpreter and never compiles; the second
    call builds the program, and later calls reuse it."""
    from portops._einsum import program as program_module

    a, b = np.ones((3, 4)), np.ones((4, 5))
    written, _ = _program("ij,jk->ik", [a, b], "numpy")
    built: list[Any] = []
    real_build = program_module.Program.build

    def counting_build(self: Any) -> Any:
        built.append(self)
        return real_build(self)

    monkeypatch.setattr(program_module.Program, "build", counting_build)
    interpreted: list[int] = []

    def first(x: Any, y: Any) -> Any:
        interpreted.append(1)
        return x @ y

    run = program_module.runner(lambda: written, first)
    for k in range(4):
        np.testing.assert_allclose(run(a, b * (k + 1)), a @ b * (k + 1))
    assert interpreted == [1] and built == [written]
