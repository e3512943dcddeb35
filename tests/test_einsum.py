"""portops.einsum against numpy.einsum on every backend and every implementation."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from backends import Backend, assert_matches, requested_backends, require
from einsum_cases import CASES, DTYPES, case_id, make_operands, random_cases

import portops
from portops import _dispatch

# Implementations and strategies registered per library, reached with portops.prefer.
IMPLEMENTATIONS = {
    "numpy": ("numpy/lowering", "numpy/loop", "numpy_einsum", "generic"),
    "torch": ("torch/lowering", "torch/einsum", "torch/numpy_loop", "generic"),
}


def _implementations(backend: Backend) -> tuple[str, ...]:
    return IMPLEMENTATIONS.get(backend.library, ("generic",))


def _refusal(impl: str, eq: str, inputs: list[Any]) -> str | None:
    """Why implementation `impl` (or ``"implementation/strategy"``) does not take these
    arguments (its own ``applies`` and registration say so), or None when it does."""
    name, _, strategy = impl.partition("/")
    call = _dispatch._operations["einsum"].prepare(eq, *inputs)
    _dispatch._load_backend(call.library)
    found = {i.name: i for i in _dispatch._registry["einsum"]}[name]
    reason = found.reason_not_applicable(call)
    if reason is None and strategy and found.strategies is not None:
        s = found.strategies.by_name[strategy]
        reason = None if s.applies is None else s.applies(call.args)
        if reason is None and s.missing(found.strategies.needs(call.args)):
            reason = "the call needs a feature it does not keep"
    return reason


def _check(backend: Backend, eq: str, arrays: list[np.ndarray], **kw: object) -> None:
    expected = np.einsum(eq, *arrays)
    got = portops.einsum(eq, *[backend.asarray(a) for a in arrays], **kw)
    assert_matches(backend, got, np.asarray(expected))


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cases_match_numpy(backend: Backend, case: tuple, dtype: str) -> None:
    eq, shapes = case
    rng = np.random.default_rng(0)
    _check(backend, eq, make_operands(shapes, dtype, rng))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`backend_impl`: each requested backend with each implementation of its library."""
    if "backend_impl" in metafunc.fixturenames:
        names, _ = requested_backends()
        pairs = [(n, i) for n in names for i in _implementations(Backend(n))]
        metafunc.parametrize("backend_impl", pairs, ids=[f"{n}-{i}" for n, i in pairs])


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", ["float64", "complex128", "int64", "bool"])
def test_every_implementation_matches_numpy(
    backend_impl: tuple[str, str], dtype: str, case: tuple
) -> None:
    name, impl = backend_impl
    backend = require(name)
    eq, shapes = case
    arrays = make_operands(shapes, dtype, np.random.default_rng(1))
    reason = _refusal(impl, eq, [backend.asarray(a) for a in arrays])
    if reason is not None:
        pytest.skip(f"{impl}: {reason}")
    with portops.prefer(einsum=impl):
        _check(backend, eq, arrays)


def test_random_equations_match_numpy(backend: Backend) -> None:
    """Several hundred seeded random equations, on every implementation."""
    cases = random_cases(seed=2024, count=300 if backend.library == "numpy" else 120)
    rng = np.random.default_rng(3)
    ran = dict.fromkeys(_implementations(backend), 0)
    for k, (eq, shapes) in enumerate(cases):
        dtype = ("float64", "int64", "complex128", "bool")[k % 4]
        arrays = make_operands(shapes, dtype, rng)
        for impl in _implementations(backend):
            if _refusal(impl, eq, [backend.asarray(a) for a in arrays]) is not None:
                continue  # e.g. torch.einsum on bool, or on integers on CUDA
            with portops.prefer(einsum=impl):
                try:
                    _check(backend, eq, arrays)
                except Exception as exc:
                    raise AssertionError(f"{impl} on {eq!r} {shapes} {dtype}: {exc}") from exc
            ran[impl] += 1
    # Every implementation the equations reach ran: cost-ruled ones and CUDA-only ones
    # may apply to none of them on some backends.
    assert any(ran.values()), ran


@pytest.mark.parametrize(
    "optimize", ["auto", True, False, "greedy", "optimal", "dp", [(1, 2), (0, 1)]]
)
def test_optimize_choices(backend: Backend, optimize: object) -> None:
    rng = np.random.default_rng(4)
    arrays = make_operands(((3, 4), (4, 5), (5, 2)), "float64", rng)
    _check(backend, "ij,jk,kl->il", arrays, optimize=optimize)


def test_mixed_dtypes_follow_numpy(backend: Backend) -> None:
    rng = np.random.default_rng(5)
    a = make_operands(((3, 4),), "int32", rng)[0]
    b = make_operands(((4,),), "float32", rng)[0]
    expected = np.einsum("ij,j->i", a, b)
    got = portops.einsum("ij,j->i", backend.asarray(a), backend.asarray(b))
    assert_matches(backend, got, expected)


def test_float32_keeps_dtype(backend: Backend) -> None:
    rng = np.random.default_rng(6)
    arrays = make_operands(((2, 3, 4, 5), (2, 3, 6, 5)), "float32", rng)
    _check(backend, "bnid,bnjd->bnij", arrays)


def test_sublist_format(backend: Backend) -> None:
    rng = np.random.default_rng(7)
    a, b = make_operands(((3, 4), (4, 5)), "float64", rng)
    expected = np.einsum(a, [0, 1], b, [1, 2], [2, 0])
    got = portops.einsum(backend.asarray(a), [0, 1], backend.asarray(b), [1, 2], [2, 0])
    assert_matches(backend, got, expected)
    implicit = portops.einsum(backend.asarray(a), [Ellipsis, 1])
    assert_matches(backend, implicit, np.einsum(a, [Ellipsis, 1]))


def test_sublist_labels_follow_numpy() -> None:
    """Labels 0-51 (numpy's letters, also as an integer array); 52 and up raise."""
    a = np.random.default_rng(8).uniform(size=(3, 3))
    np.testing.assert_allclose(portops.einsum(a, np.asarray([0, 0])), np.trace(a))
    np.testing.assert_allclose(portops.einsum(a, [51, 0], [0, 51]), a.T)
    with pytest.raises(ValueError, match="labels of the interleaved format are 0-51"):
        portops.einsum(a, [0, 52])
    _, report = portops.einsum_path(np.ones((1,) * 27), range(27))
    assert report.equation == "ABCDEFGHIJKLMNOPQRSTUVWXYZa->ABCDEFGHIJKLMNOPQRSTUVWXYZa"


# -- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "eq,shapes",
    [
        ("bnid,bnjd->bnij", ((2, 2, 3, 4), (2, 2, 2, 4))),
        ("bind,jnd->bnij", ((2, 3, 2, 4), (2, 2, 4))),
        ("ii,ij->j", ((3, 3), (3, 2))),
        ("ij,jk,kl->il", ((2, 3), (3, 4), (4, 2))),
        ("i,j->ij", ((3,), (2,))),
    ],
)
def test_torch_gradcheck(eq: str, shapes: tuple) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    tensors = [
        torch.from_numpy(a).requires_grad_(True) for a in make_operands(shapes, "float64", rng)
    ]
    for impl in ("torch/lowering", "torch/einsum", "generic"):
        with portops.prefer(einsum=impl):
            assert torch.autograd.gradcheck(lambda *t: portops.einsum(eq, *t), tensors)


def test_jax_grad_and_jit() -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    rng = np.random.default_rng(10)
    a, b = (jnp.asarray(x) for x in make_operands(((2, 3, 2, 4), (2, 2, 4)), "float64", rng))

    def loss(x, y):
        return jnp.sum(portops.einsum("bind,jnd->bnij", x, y) ** 2)

    def ref(x, y):
        return jnp.sum(jnp.einsum("bind,jnd->bnij", x, y) ** 2)

    for got, want in zip(
        jax.grad(loss, argnums=(0, 1))(a, b), jax.grad(ref, argnums=(0, 1))(a, b), strict=True
    ):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
    jitted = jax.jit(lambda x, y: portops.einsum("bind,jnd->bnij", x, y))
    np.testing.assert_allclose(
        np.asarray(jitted(a, b)), np.einsum("bind,jnd->bnij", np.asarray(a), np.asarray(b))
    )


def test_torch_compile() -> None:
    # fullgraph: while dynamo traces, einsum is torch.einsum with checks made outside.
    torch = pytest.importorskip("torch")
    a, b = torch.randn(2, 5, 3, 4), torch.randn(6, 3, 4)
    portops.einsum("bind,jnd->bnij", a, b)  # planning (locks, caches) happens eagerly
    compiled = torch.compile(lambda x, y: portops.einsum("bind,jnd->bnij", x, y), fullgraph=True)
    torch.testing.assert_close(compiled(a, b), torch.einsum("bind,jnd->bnij", a, b))


# -- laziness, views, inputs -------------------------------------------------------------


def test_dask_stays_lazy() -> None:
    da = pytest.importorskip("dask.array")
    import dask

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("einsum computed a dask array")

    rng = np.random.default_rng(11)
    arrays = make_operands(((4, 3, 3), (3, 5), (5, 2)), "float64", rng)
    lazy = [da.from_array(a, chunks=2) for a in arrays]
    with dask.config.set(scheduler=refuse):
        got = portops.einsum("bii,ij,jk->bk", *lazy)
        path, _ = portops.einsum_path("bii,ij,jk->bk", *lazy)
    assert isinstance(got, da.Array)
    assert path[0] == "einsum_path"
    np.testing.assert_allclose(got.compute(), np.einsum("bii,ij,jk->bk", *arrays))


def test_inputs_not_modified(backend: Backend) -> None:
    rng = np.random.default_rng(12)
    arrays = make_operands(((3, 3, 4), (4, 5)), "float64", rng)
    copies = [a.copy() for a in arrays]
    inputs = [backend.asarray(a) for a in arrays]
    portops.einsum("iij,jk->ik", *inputs)
    for x, c in zip(inputs, copies, strict=True):
        np.testing.assert_array_equal(backend.to_numpy(x), c)


@pytest.mark.parametrize(
    "eq,shape", [("ij->i", (3, 1)), ("ijk->ki", (30, 1, 30)), ("daa->a", (1, 2, 2))]
)
def test_result_is_never_a_view(backend_impl: tuple[str, str], eq: str, shape: tuple) -> None:
    # Summing a label of size 1 is a reshape: the result must still be a new array.
    name, impl = backend_impl
    backend = require(name)
    if backend.library not in ("numpy", "torch") or backend.name == "numpy_readonly":
        pytest.skip("immutable or lazy arrays: a view cannot be written through")
    a = np.random.default_rng(3).standard_normal(shape)
    x = backend.asarray(a)
    if (reason := _refusal(impl, eq, [x])) is not None:
        pytest.skip(f"{impl} does not take this call: {reason}")
    with portops.prefer(einsum=impl):
        got = portops.einsum(eq, x)
    got[...] = 7.0
    np.testing.assert_array_equal(backend.to_numpy(x), a)


def test_zero_size_labels_on_dask_chunks() -> None:
    da = pytest.importorskip("dask.array")
    for (sa, ca), (sb, cb) in [
        (((2, 3, 0), 1), ((3, 0, 3), 1)),
        (((2, 0, 4), (1, 1, 2)), ((0, 4, 3), (1, 2, 1))),
    ]:
        a, b = np.ones(sa), np.ones(sb)
        got = portops.einsum(
            "ijk,jkl->il", da.from_array(a, chunks=ca), da.from_array(b, chunks=cb)
        )
        assert isinstance(got, da.Array)
        np.testing.assert_array_equal(got.compute(), np.einsum("ijk,jkl->il", a, b))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS["numpy"])
@pytest.mark.parametrize(
    "eq,a", [("", np.float64(3.0)), ("->", np.array(3.0)), ("ii", np.eye(3)), ("i->", np.ones(3))]
)
def test_numpy_zero_d_results_are_scalars(impl: str, eq: str, a: Any) -> None:
    with portops.prefer(einsum=impl):
        got = portops.einsum(eq, a)
    expected = np.einsum(eq, a)
    assert type(got) is type(expected) is np.float64
    assert got == expected


def test_torch_integers_keep_their_dtype() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    arrays = [rng.integers(-100, 100, s).astype(np.int8) for s in ((3, 2), (4, 3, 4, 2), (3,))]
    eq, tensors = "dg,ydyg,d->d", [torch.from_numpy(a) for a in arrays]
    expected = np.einsum(eq, *arrays)  # wraps around in int8
    with pytest.raises(ValueError, match=r"integers \(summed in int64"):
        with portops.prefer(einsum="torch/einsum"):
            portops.einsum(eq, *tensors)
    compiled = torch.compile(
        lambda *xs: portops.einsum(eq, *xs), backend="aot_eager", fullgraph=True
    )
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        on = [t.to(device) for t in tensors]
        for got in (portops.einsum(eq, *on), compiled(*on)):
            assert got.dtype == torch.int8 and got.device.type == device
            np.testing.assert_array_equal(got.cpu().numpy(), expected)


def test_torch_integer_einsum_without_gemms_matches_numpy() -> None:
    """The traced path's integer einsum on CUDA (no integer GEMM there), on the CPU."""
    torch = pytest.importorskip("torch")
    from portops._backends.torch.einsum import _summed_products

    rng = np.random.default_rng(6)
    for eq, shapes in [c for c in CASES if "->" in c[0] and "." not in c[0]]:
        arrays = [rng.integers(-50, 50, s) for s in shapes]
        got = _summed_products(eq, *[torch.from_numpy(a) for a in arrays])
        np.testing.assert_array_equal(got.numpy(), np.einsum(eq, *arrays), err_msg=eq)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64", "complex32"])
def test_torch_dtypes_without_gemms_are_computed_wider(dtype: str) -> None:
    """torch has no CPU GEMM or typed sum for these: eager and traced calls compute in
    int64 (complex64) and wrap back, as NumPy's einsum wraps around."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    eq, shapes = "ij,jk,k->i", ((3, 4), (4, 5), (5,))
    if dtype == "complex32":  # small Gaussian integers: exact in half precision
        arrays = [(rng.integers(-3, 4, s) + 1j * rng.integers(-3, 4, s)) for s in shapes]
        arrays = [a.astype(np.complex64) for a in arrays]
        tensors = [torch.from_numpy(a).to(torch.complex32) for a in arrays]
    else:
        top = np.iinfo(dtype).max
        arrays = [rng.integers(0, top, s, dtype=dtype, endpoint=True) for s in shapes]
        tensors = [torch.from_numpy(a) for a in arrays]
    expected = np.einsum(eq, *arrays)
    reason = portops.explain("einsum", eq, *tensors).reason
    assert reason.startswith(f"no torch GEMM for {tensors[0].dtype}: computed in torch.")
    compiled = torch.compile(lambda *xs: portops.einsum(eq, *xs), backend="eager", fullgraph=True)
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        on = [t.to(device) for t in tensors]
        for got in (portops.einsum(eq, *on), compiled(*on)):
            assert got.dtype == tensors[0].dtype and got.device.type == device
            wide = got.to(torch.complex64) if dtype == "complex32" else got
            np.testing.assert_array_equal(wide.cpu().numpy(), expected)


# -- memory_limit --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "eq,shapes,limit",
    [
        ("ij,jk,kl->il", ((6, 40), (40, 30), (30, 5)), 50),  # intermediate 6x30 > 50
        ("bij,bjk->bik", ((4, 3, 2), (4, 2, 3)), 10),  # multiply-and-sum temporary
        ("ij,jk,kl->", ((5, 8), (8, 7), (7, 6)), 3),
        ("ab,bc,cd->ad", ((3, 20), (20, 20), (20, 3)), 7),
    ],
)
def test_memory_limit_is_honoured(backend: Backend, eq: str, shapes: tuple, limit: int) -> None:
    rng = np.random.default_rng(13)
    arrays = make_operands(shapes, "float64", rng)
    inputs = [backend.asarray(a) for a in arrays]
    _, report = portops.einsum_path(eq, *inputs, memory_limit=limit)
    assert report.largest_intermediate <= limit, str(report)
    _check(backend, eq, arrays, memory_limit=limit)


def test_memory_limit_reports_chunking() -> None:
    a, b, c = (np.ones(s) for s in ((6, 40), (40, 30), (30, 5)))
    _, report = portops.einsum_path("ij,jk,kl->il", a, b, c, memory_limit=20)
    assert report.chunks and report.memory_limit == 20
    assert report.largest_intermediate <= 20
    assert all(1 <= c.chunk < c.size for c in report.chunks)
    assert "Chunked over label" in str(report)  # the table names it too


# -- einsum_path -----------------------------------------------------------------------------


def test_einsum_path_report_and_reuse(backend: Backend) -> None:
    rng = np.random.default_rng(14)
    arrays = make_operands(((2, 4, 3, 5), (2, 6, 3, 5), (6, 7)), "float64", rng)
    inputs = [backend.asarray(a) for a in arrays]
    path, report = portops.einsum_path("bind,bjnd,jk->bnik", *inputs)
    assert path[0] == "einsum_path" and len(path) == 3
    assert report.equation == "bind,bjnd,jk->bnik"
    assert report.kinds == ("batched matmul", "batched matmul")
    assert report.flops == sum(s.flops for s in report.steps) < report.naive_flops
    assert report.speedup == report.naive_flops / report.flops
    assert report.steps[-1].result == 0 and report.steps[0].result > 0  # the last is the output
    assert report.largest_intermediate >= report.steps[0].result
    for word in ("batched matmul", "FLOPs", "Largest intermediate", "bind,bjnd,jk->bnik"):
        assert word in str(report)  # the table shows the same facts
    _check(backend, "bind,bjnd,jk->bnik", arrays, optimize=path)


def test_einsum_path_reports_kinds() -> None:
    _, report = portops.einsum_path("ii,i,j->ji", np.ones((3, 3)), np.ones(3), np.ones(2))
    assert report.kinds[0] == "diagonal" and "multiply" in report.kinds
    assert report.steps[0].equation == "ii->i"
    _, report = portops.einsum_path("ij->ji", np.ones((3, 2)))
    assert report.kinds == ("transpose",)


def test_transposed_operands_are_not_copied() -> None:
    """The issue-18043 layout needs no copy: BLAS reads the transposed views."""
    a, b = np.ones((4, 5, 2, 6), np.float32), np.ones((4, 7, 2, 6), np.float32)
    _, report = portops.einsum_path("bind,bjnd->bnij", a, b, optimize=False)
    (step,) = (s for s in report.steps if s.kind == "batched matmul")
    assert step.copies == 0, str(report)
    assert (step.batch, step.m, step.n, step.k) == (4 * 2, 5, 7, 6)


def test_plan_is_cached() -> None:
    import importlib

    einsum_module = importlib.import_module("portops._ops.einsum")

    a, b = np.ones((3, 4)), np.ones((4, 5))
    # A process's first call loads the installed backends, whose registration clears the
    # signature cache: two calls, so that the test holds run alone or after others.
    portops.einsum("ij,jk->ik", a, b)
    portops.einsum("ij,jk->ik", a, b)
    before = einsum_module._plan.cache_info()
    plans = len(einsum_module.PLANS)
    portops.einsum("ij,jk->ik", a + 1, b)  # the signature's plan answers
    portops.einsum("ij,jk->ik", a + 1, b, casting="unsafe")  # the lowering cache answers
    after = einsum_module._plan.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1
    assert len(einsum_module.PLANS) == plans


def _first_call(eq: str, *operands: Any, **kwargs: Any) -> Any:
    """(strategy, lowering, result) of a first call (every einsum cache emptied): the
    strategy explain() names, and the lowering the call left in the cache."""
    einsum_module = importlib.import_module("portops._ops.einsum")
    portops.einsum("i->", operands[0].ravel())  # the operands' type is known from now on
    einsum_module.clear_caches()
    result = portops.einsum(eq, *operands, **kwargs)
    assert len(einsum_module.PLANS) == 1
    args = einsum_module._lookup((eq, *operands), "auto", None).args  # the cached one
    return portops.explain("einsum", eq, *operands).strategy, args.lowering, result


def test_small_first_call_builds_no_plan() -> None:
    """numpy.einsum's loop wins on small operands, decided from the label sizes: the
    contraction order and lowering are never built for it."""
    rng = np.random.default_rng(21)
    a, b, c = rng.uniform(size=(3, 4)), rng.uniform(size=(4, 5)), rng.uniform(size=(5, 2))
    strategy, lowering, result = _first_call("ij,jk,kl->il", a, b, c)
    assert strategy == "loop"
    assert not lowering.planned
    np.testing.assert_allclose(result, np.einsum("ij,jk,kl->il", a, b, c))
    # Asking for the path builds the plan, on the same entry.
    path, report = portops.einsum_path("ij,jk,kl->il", a, b, c)
    assert len(path) == 3 and report.kinds == ("batched matmul", "batched matmul")


def test_large_first_call_builds_its_plan() -> None:
    rng = np.random.default_rng(22)
    a, b = rng.uniform(size=(64, 48)), rng.uniform(size=(48, 40))
    strategy, lowering, result = _first_call("ij,jk->ik", a, b)
    assert strategy == "lowering"
    assert lowering.planned
    np.testing.assert_allclose(result, a @ b)


@pytest.mark.parametrize("optimize", ["greedy", ("greedy", 10), ["einsum_path", (0, 1), (0, 1)]])
def test_non_default_optimize_is_planned_at_once(optimize: Any) -> None:
    """Errors in an explicit path or a finder are raised by the call that gave them,
    even where the loop runs; so these forms are planned at once."""
    einsum_module = importlib.import_module("portops._ops.einsum")
    einsum_module.clear_caches()
    a, b, c = np.ones((2, 3)), np.ones((3, 2)), np.ones((2, 2))
    args = einsum_module._lookup(("ij,jk,kl->il", a, b, c), optimize, None).args
    assert args.lowering.planned
    np.testing.assert_allclose(
        portops.einsum("ij,jk,kl->il", a, b, c, optimize=optimize), a @ b @ c
    )
    with pytest.raises(RuntimeError, match="leaves 2 operands"):
        portops.einsum("ij,jk,kl->il", a, b, c, optimize=["einsum_path", (0, 1)])


def test_gradient_after_a_call_without_one() -> None:
    """A tensor that needs gradients gets them even after a same-shape call without
    (the first chose numpy.einsum's loop, which has none)."""
    torch = pytest.importorskip("torch")
    a, b, c = torch.rand(3, 4, dtype=torch.float64), torch.rand(4, 5), torch.rand(5, 2)
    b, c = b.double(), c.double()
    for _ in range(2):
        portops.einsum("ij,jk,kl->il", a, b, c)
    a.requires_grad_()
    portops.einsum("ij,jk,kl->il", a, b, c).sum().backward()
    assert a.grad is not None
    torch.testing.assert_close(a.grad, (b @ c).sum(1).expand(3, 4))


def test_repeated_calls_use_the_signature_plan() -> None:
    """Later calls with one signature run the implementation's plan (no arguments
    record), with the same values as the first call."""
    einsum_module = importlib.import_module("portops._ops.einsum")
    rng = np.random.default_rng(23)
    for shapes in (((3, 4), (4, 5)), ((64, 48), (48, 40))):
        a, b = (rng.uniform(size=s) for s in shapes)
        portops.einsum("i->", a[0])  # the operands' type is known from now on
        einsum_module.clear_caches()
        first = portops.einsum("ij,jk->ik", a, b)
        assert len(einsum_module.PLANS) == 1
        np.testing.assert_allclose(portops.einsum("ij,jk->ik", a + 1, b), (a + 1) @ b)
        np.testing.assert_allclose(first, a @ b)
    scalar = portops.einsum("ii", np.eye(3))
    assert portops.einsum("ii", np.eye(3)) == scalar == 3.0
    assert isinstance(portops.einsum("ii", np.eye(3)), np.float64)


def test_threads_share_the_cache() -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(15)
    jobs = [make_operands(((k, 3), (3, k + 1)), "float64", rng) for k in range(2, 30)]

    def work(ab: list[np.ndarray]) -> bool:
        for _ in range(5):
            if not np.allclose(portops.einsum("ij,jk->ik", *ab), ab[0] @ ab[1]):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, jobs * 3))


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "eq,shapes,match",
    [
        ("ij,jk->ik", ((3, 4), (5, 6)), "label 'j' has size 4 in operand 0 but 5 in operand 1"),
        ("ij,jk->ik", ((3, 4, 5), (4, 6)), "operand 0 has 3 dimension.*too few labels"),
        ("ijk,jk->ik", ((3, 4), (4, 6)), "operand 0 has 2 dimension.*too many labels"),
        ("ij,jk->iz", ((3, 4), (4, 6)), "output label 'z' does not appear"),
        ("ij,jk->ii", ((3, 4), (4, 6)), "output label 'i' appears more than once"),
        ("ij,jk->ik->i", ((3, 4), (4, 6)), "'->' more than once"),
        ("ij,j-k", ((3, 4), (4, 6)), "stray '-' or '>'"),
        ("i1,jk", ((3, 4), (4, 6)), "invalid character '1'"),
        ("i.j,jk", ((3, 4), (4, 6)), "invalid character '.'"),
        ("ij,jk,kl", ((3, 4), (4, 6)), "describe 3 operand.*2 were given"),
        ("ij", ((3, 4), (4, 6)), "describe 1 operand.*2 were given"),
        ("......i", ((3,),), "more than one ellipsis"),
        ("...i->i", ((2, 3),), "no '...' but the ellipsis covers 1"),
        ("ii->i", ((3, 4),), "repeated in operand 0 with sizes 3 and 4"),
    ],
)
def test_malformed_subscripts_raise(backend: Backend, eq: str, shapes: tuple, match: str) -> None:
    inputs = [backend.asarray(np.ones(s)) for s in shapes]
    with pytest.raises(ValueError, match=match):
        portops.einsum(eq, *inputs)


def test_argument_type_errors() -> None:
    a = np.ones((2, 2))
    with pytest.raises(TypeError, match="pass the subscripts as a string"):
        portops.einsum(3, a)
    with pytest.raises(ValueError, match="at least one operand"):
        portops.einsum("ij")
    with pytest.raises(ValueError, match="no subscripts and no operands"):
        portops.einsum()
    with pytest.raises(TypeError, match="memory_limit must be a positive integer"):
        portops.einsum("ij", a, memory_limit=2.5)
    with pytest.raises(ValueError, match="memory_limit must be a positive integer"):
        portops.einsum("ij", a, memory_limit=0)
    with pytest.raises(ValueError, match="unknown optimize='fastest'"):
        portops.einsum("ij", a, optimize="fastest")
    with pytest.raises(TypeError, match="optimize must be"):
        portops.einsum("ij", a, optimize=3)
    with pytest.raises(ValueError, match="invalid contraction"):
        portops.einsum("ij,jk", a, a, optimize=[(0, 5)])
    with pytest.raises(TypeError, match="sublist 0 must contain integers"):
        portops.einsum(a, ["i", "j"])
    with pytest.raises(ValueError, match="labels of the interleaved format are 0-51"):
        portops.einsum(a, [0, -1])
    with pytest.raises(RuntimeError, match="explicit path leaves 2 operands"):
        portops.einsum("ij,jk,kl", a, a, a, optimize=[(0, 1)])


def test_non_numeric_operand_raises() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="operand 1 must be an array, a number"):
        portops.einsum("ij,jk", torch.ones(2, 2), object())


def test_mixed_libraries_raise() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="two array libraries"):
        portops.einsum("ij,jk", np.ones((2, 2)), torch.ones(2, 2))


def test_explain_and_implementations_cover_einsum() -> None:
    names = {i["name"] for i in portops.implementations("einsum")}
    assert {"generic", "numpy", "numpy_einsum"} <= names
    text = portops.explain("einsum", "ij,jk", np.ones((20, 30)), np.ones((30, 40)))
    assert (text.chosen, text.strategy) == ("numpy", "lowering")


# -- layouts: the plan depends on strides, so views must work too --------------------------


@pytest.mark.parametrize(
    "eq,shape_a,perm_a,shape_b,perm_b",
    [
        ("ij,jk->ik", (3, 4), (1, 0), (5, 3), (1, 0)),
        ("bnid,bnjd->bnij", (2, 5, 3, 4), (0, 2, 1, 3), (2, 6, 4, 3), (0, 3, 1, 2)),
        ("bind,jnd->bnij", (4, 2, 3, 5), (1, 3, 2, 0), (4, 3, 6), (2, 1, 0)),
        ("ijk,jkl->il", (2, 3, 4), (2, 1, 0), (2, 3, 5), (1, 0, 2)),
    ],
)
def test_transposed_views_match_numpy(
    backend: Backend, eq: str, shape_a: tuple, perm_a: tuple, shape_b: tuple, perm_b: tuple
) -> None:
    rng = np.random.default_rng(16)
    a, b = make_operands((shape_a, shape_b), "float64", rng)
    xp = backend.xp
    va = xp.permute_dims(backend.asarray(a), perm_a)
    vb = xp.permute_dims(backend.asarray(b), perm_b)
    expected = np.einsum(eq, a.transpose(perm_a), b.transpose(perm_b))
    for impl in _implementations(backend):
        if _refusal(impl, eq, [va, vb]) is not None:
            continue  # e.g. the CUDA-only default on CPU tensors
        with portops.prefer(einsum=impl):
            assert_matches(backend, portops.einsum(eq, va, vb), expected)


def test_numpy_strided_and_reversed_views() -> None:
    rng = np.random.default_rng(17)
    a = rng.uniform(size=(8, 10, 6))[::2, ::-1, 1::2]
    b = rng.uniform(size=(3, 7, 6))[:, ::2, ::-2]
    np.testing.assert_allclose(
        portops.einsum("bij,jkl->bikl", a, b), np.einsum("bij,jkl->bikl", a, b), rtol=1e-12
    )
    c = np.asfortranarray(rng.uniform(size=(6, 5)))
    np.testing.assert_allclose(portops.einsum("ij,jk->ik", c, c.T), c @ c.T, rtol=1e-12)


def test_torch_integer_matmul_fallback() -> None:
    """The CUDA path for integers (GEMMs refuse them), checked on CPU tensors."""
    torch = pytest.importorskip("torch")
    from portops._backends.torch.einsum import integer_matmul

    a = torch.randint(-5, 5, (2, 3, 4))
    b = torch.randint(-5, 5, (2, 4, 6))
    got = integer_matmul(a, b)
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.matmul(a, b))


def test_torch_unmergeable_batch_copied_for_bmm(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bind,bjnd->bnij`` on torch: batch axes that do not merge are copied into one
    ``[batch, rows, cols]`` array per operand (unit stride kept innermost), then bmm."""
    torch = pytest.importorskip("torch")
    from portops._backends.torch import einsum as torch_einsum

    laid_out = []
    real = torch_einsum._as_batch_of_matrices

    def spy(x: Any) -> Any:
        r = real(x)
        laid_out.append((x, r))
        return r

    monkeypatch.setattr(torch_einsum, "_as_batch_of_matrices", spy)
    rng = np.random.default_rng(18)
    a, b = make_operands(((3, 4, 2, 5), (3, 6, 2, 5)), "float64", rng)
    ta = torch.from_numpy(a).requires_grad_(True)
    tb = torch.from_numpy(b).requires_grad_(True)
    got = portops.einsum("bind,bjnd->bnij", ta, tb)
    assert len(laid_out) == 2
    for x, r in laid_out:
        assert r.shape == (6, *x.shape[-2:])
        assert 1 in r.stride()[-2:]  # BLAS-readable, straight or through its transpose flag
        np.testing.assert_array_equal(r.detach().numpy(), x.detach().reshape(6, *x.shape[-2:]))
    np.testing.assert_allclose(got.detach().numpy(), np.einsum("bind,bjnd->bnij", a, b))
    assert ta.grad is None and np.array_equal(ta.detach().numpy(), a)  # inputs untouched
    assert torch.autograd.gradcheck(lambda x, y: portops.einsum("bind,bjnd->bnij", x, y), (ta, tb))


def test_matrix_vector_runs_blas() -> None:
    """A large matrix-vector product is a GEMV step of the lowering (NumPy and torch CPU)."""
    rng = np.random.default_rng(19)
    m, v = rng.standard_normal((1024, 1024)), rng.standard_normal(1024)
    assert portops.explain("einsum", "ij,j->i", m, v).strategy == "lowering"
    np.testing.assert_allclose(portops.einsum("ij,j->i", m, v), m @ v)
    np.testing.assert_allclose(portops.einsum("j,ij->i", v, m), m @ v)
    np.testing.assert_allclose(portops.einsum("ji,j->i", m, v), m.T @ v)
    torch = pytest.importorskip("torch")
    tm, tv = torch.from_numpy(m), torch.from_numpy(v)
    assert portops.explain("einsum", "ij,j->i", tm, tv).strategy == "lowering"
    np.testing.assert_allclose(portops.einsum("ij,j->i", tm, tv).numpy(), m @ v)


def test_torch_cuda_default_is_torch_einsum_where_it_applies() -> None:
    """The choice on CUDA, checked on CPU tensors presented as a CUDA call."""
    torch = pytest.importorskip("torch")
    einsum_module = importlib.import_module("portops._ops.einsum")

    torch_einsum = importlib.import_module("portops._backends.torch.einsum")

    def chosen(eq: str, *ops: Any, memory_limit: int | None = None) -> str:
        call = einsum_module._lookup((eq, *ops), "auto", memory_limit)
        return torch_einsum.choose(call.args, device="cuda")[0]

    a, b = torch.ones(2, 3, 4), torch.ones(2, 4, 5)
    assert chosen("bij,bjk->bik", a, b) == "einsum"
    assert chosen("bij,bjk->bik", a.to(torch.complex64), b.to(torch.complex64)) == "einsum"
    assert chosen("bij,bjk->bik", a.long(), b.long()) == "lowering"
    assert chosen("bij,bjk->bik", a.bool(), b.bool()) == "lowering"
    c = torch.ones(5, 2)
    assert chosen("bij,bjk,kl->bil", a, b, c, memory_limit=8) == "lowering"
    names = {i["name"]: i for i in portops.implementations("einsum")}
    assert "einsum" in names["torch"]["strategies"]


# -- numpy.einsum's keywords on every library ------------------------------------------------


def test_out_dtype_and_order_on_every_backend(backend: Backend) -> None:
    rng = np.random.default_rng(19)
    a, b = make_operands(((3, 4), (4, 5)), "float64", rng)
    xa, xb = backend.asarray(a), backend.asarray(b)
    expected = np.einsum("ij,jk->ik", a, b)
    got = portops.einsum("ij,jk->ik", xa, xb, dtype="float32", casting="same_kind")
    assert_matches(backend, got, expected.astype(np.float32))
    assert_matches(backend, portops.einsum("ij,jk->ik", xa, xb, order="C"), expected)
    with pytest.raises(TypeError, match="cannot cast operand 0 from float64 to int64"):
        portops.einsum("ij,jk->ik", xa, xb, dtype="int64")
    out = backend.asarray(np.zeros((3, 5)))
    if backend.library == "jax":
        with pytest.raises(TypeError, match="JAX arrays are immutable"):
            portops.einsum("ij,jk->ik", xa, xb, out=out)
        return
    if backend.name == "numpy_readonly" or backend.library == "dask":
        return  # read-only arrays cannot be written; dask arrays are written lazily
    assert portops.einsum("ij,jk->ik", xa, xb, out=out) is out
    np.testing.assert_allclose(backend.to_numpy(out), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="out has shape"):
        portops.einsum("ij,jk->ik", xa, xb, out=backend.asarray(np.zeros((5, 3))))
    # `casting` governs out at every optimize (numpy.einsum's optimized path ignores it).
    ints = backend.asarray(np.zeros((3, 5), np.int64))
    for optimize in ("auto", True, False, "greedy"):
        with pytest.raises(TypeError, match="cannot cast the result from float64 to int64"):
            portops.einsum("ij,jk->ik", xa, xb, out=ints, optimize=optimize)
    assert portops.einsum("ij,jk->ik", xa, xb, out=ints, casting="unsafe") is ints
    scalar = backend.asarray(np.zeros(()))  # a 0-d out, with every path finder
    for optimize in ("auto", "optimal", False):
        assert portops.einsum("ij,ij->", xa, xa, out=scalar, optimize=optimize) is scalar
        np.testing.assert_allclose(backend.to_numpy(scalar), np.sum(a * a), rtol=1e-12)


@pytest.mark.parametrize("rows", [1, 300, 5000])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_tall_skinny_rows(backend: Backend, rows: int, c: int) -> None:
    # Short C-contiguous rows run numpy.einsum's loop in Fortran order (one pass per column).
    rng = np.random.default_rng(19)
    a, b = make_operands(((rows, c), (rows, c)), "float32", rng)
    _check(backend, "nc,nc->n", [a, b])
