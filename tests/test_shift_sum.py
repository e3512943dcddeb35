"""shift_sum, its adjoint and pseudo-inverse: every implementation, every backend."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import shift_sum_reference as ref
from backends import Backend, assert_matches, strategies, tolerance
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import portops

OPS = ("shift_sum", "shift_sum_adjoint", "shift_sum_pinv")


def impls_for(op: str, backend: Backend) -> list[str]:
    """Every implementation of `op` registered for this backend, and every strategy of
    those with several (``"implementation/strategy"``, as ``prefer`` takes them)."""
    names = []
    for impl, found in strategies(op, backend.library, backend.device).items():
        names.append(impl)
        if len(found) > 1:
            names += [f"{impl}/{s}" for s in found]
    return names


@contextlib.contextmanager
def preferred(op: str, name: str) -> Iterator[bool]:
    """``prefer(op=name)``; yields False (the caller skips its check) where `name` is a
    strategy that does not apply to the call (a CUDA kernel on CPU tensors, say)."""
    with portops.prefer(**{op: name}):
        try:
            yield True
        except ValueError as exc:
            if "/" not in name or "does not apply" not in str(exc):
                raise


# (x shape, step, axis, channel_axis, mask shape or None)
CASES = [
    pytest.param((3, 5, 7), 1, -1, -3, None, id="no-batch-odd"),
    pytest.param((2, 4, 5, 6), 2, -1, -3, (5, 6), id="batch-mask2d"),
    pytest.param((2, 4, 5, 6), 3, -1, -3, (4, 5, 6), id="mask3d-step3"),
    pytest.param((2, 4, 5, 6), 1, -1, -3, (2, 4, 5, 6), id="mask4d"),
    pytest.param((2, 3, 4, 5, 6), 1, -1, -3, (5, 6), id="two-batch-dims"),
    pytest.param((1, 5, 7), 2, -1, -3, None, id="C=1"),
    pytest.param((3, 5, 7), 0, -1, -3, (5, 7), id="step0"),
    pytest.param((2, 4, 3, 5), -2, -1, -3, None, id="negative-step"),
    pytest.param((2, 4, 3, 5), [0, 3, 1, 6], -1, -3, (4, 1, 5), id="irregular-offsets"),
    pytest.param((2, 4, 5, 3), 1, -2, -3, (4, 5, 3), id="shift-along-H"),
    pytest.param((5, 3, 4), 2, -2, -1, (5, 3, 1), id="channels-last"),
    pytest.param((4, 3, 2, 5), 1, -1, 0, (4, 1, 1, 5), id="channels-first-axis0"),
    pytest.param((3, 2, 5), 1, 0, 1, None, id="shift-axis0"),
    # Trailing axes that cannot merge into a view of the result.
    pytest.param((3, 2, 3, 4), 1, 0, 2, (3, 1, 3, 4), id="unmergeable-layout"),
]


def _make(backend: Backend, shape: Any, dtype: Any, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-5, 6, size=shape).astype(dtype)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _kwargs(axis: int, cax: int) -> dict[str, int]:
    return {"axis": axis, "channel_axis": cax}


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_forward_every_implementation(backend, shape, step, axis, cax, mask_shape, keepdims):
    x = _make(backend, shape, np.float64)
    mask = None if mask_shape is None else _make(backend, mask_shape, np.float64, seed=1)
    want = ref.forward(x, step, **_kwargs(axis, cax), mask=mask, keepdims=keepdims)
    xb = backend.asarray(x)
    mb = None if mask is None else backend.asarray(mask)
    for name in impls_for("shift_sum", backend):
        got = None
        with preferred("shift_sum", name):
            got = portops.shift_sum(xb, step, **_kwargs(axis, cax), mask=mb, keepdims=keepdims)
        if got is not None:
            assert_matches(backend, got, want)


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_adjoint_every_implementation(backend, shape, step, axis, cax, mask_shape):
    channels = shape[cax]
    y_ref = ref.forward(np.zeros(shape), step, **_kwargs(axis, cax))
    y = _make(backend, y_ref.shape, np.float64, seed=2)
    mask = None if mask_shape is None else _make(backend, mask_shape, np.float64, seed=1)
    want = ref.adjoint(y, step, channels=channels, **_kwargs(axis, cax), mask=mask)
    yb = backend.asarray(y)
    mb = None if mask is None else backend.asarray(mask)
    for name in impls_for("shift_sum_adjoint", backend):
        got = None
        with preferred("shift_sum_adjoint", name):
            got = portops.shift_sum_adjoint(
                yb, step, channels=channels, **_kwargs(axis, cax), mask=mb
            )
        if got is not None:
            assert_matches(backend, got, want)


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_pinv_matches_dense_pseudo_inverse(backend, shape, step, axis, cax, mask_shape):
    """pinv(y) equals numpy.linalg.pinv of the dense matrix: exact and minimum-norm."""
    channels = shape[cax]
    mask = None
    if mask_shape is not None:  # binary mask with zeros, plus one non-binary value
        rng = np.random.default_rng(3)
        mask = (rng.random(mask_shape) > 0.3).astype(np.float64)
        mask.flat[0] = 0.5
    dense = ref.dense_matrix(shape, step, **_kwargs(axis, cax), mask=mask)
    y_shape = ref.forward(np.zeros(shape), step, **_kwargs(axis, cax)).shape
    y = _make(backend, y_shape, np.float64, seed=4)
    want = (np.linalg.pinv(dense) @ y.reshape(-1)).reshape(shape)
    yb = backend.asarray(y)
    mb = None if mask is None else backend.asarray(mask)
    for name in impls_for("shift_sum_pinv", backend):
        got = None
        with preferred("shift_sum_pinv", name):
            got = portops.shift_sum_pinv(yb, step, channels=channels, **_kwargs(axis, cax), mask=mb)
        if got is not None:
            assert_matches(backend, got, want)
            assert np.all(np.isfinite(backend.to_numpy(got)))


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_dot_test_and_range(backend, shape, step, axis, cax, mask_shape):
    """<A x, y> == <x, A^H y> (rtol 1e-10), and A(pinv(A x)) == A x."""
    kw = {**_kwargs(axis, cax)}
    channels = shape[cax]
    x = _make(backend, shape, np.complex128, seed=5)
    mask = None if mask_shape is None else _make(backend, mask_shape, np.complex128, seed=6)
    y_shape = ref.forward(np.zeros(shape), step, **kw).shape
    y = _make(backend, y_shape, np.complex128, seed=7)
    xb, yb = backend.asarray(x), backend.asarray(y)
    mb = None if mask is None else backend.asarray(mask)
    for f_name in impls_for("shift_sum", backend):
        for a_name in impls_for("shift_sum_adjoint", backend):
            with preferred("shift_sum", f_name), preferred("shift_sum_adjoint", a_name):
                ax_ = backend.to_numpy(portops.shift_sum(xb, step, **kw, mask=mb))
                aty = backend.to_numpy(
                    portops.shift_sum_adjoint(yb, step, channels=channels, **kw, mask=mb)
                )
                lhs, rhs = np.vdot(ax_, y), np.vdot(x, aty)
                assert abs(lhs - rhs) <= 1e-10 * max(abs(lhs), abs(rhs), 1e-300), (f_name, a_name)
    image = portops.shift_sum(xb, step, **kw, mask=mb)
    for name in impls_for("shift_sum_pinv", backend):
        with preferred("shift_sum_pinv", name):
            back = portops.shift_sum_pinv(image, step, channels=channels, **kw, mask=mb)
            again = portops.shift_sum(back, step, **kw, mask=mb)
            np.testing.assert_allclose(backend.to_numpy(again), backend.to_numpy(image), rtol=1e-10)


DTYPES = ["float32", "float64", "complex64", "complex128", "int32", "int64", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_and_result_type(backend, dtype):
    if dtype == "float16" and backend.name == "array_api_strict":
        pytest.skip("array-api-strict has no float16")
    shape, step = (2, 3, 4, 5), 2
    x = _make(backend, shape, dtype)
    mask = _make(backend, (4, 5), "float32", seed=1)
    xb, mb = backend.asarray(x), backend.asarray(mask)
    try:  # each library has its own promotion rules (int with float32 differs)
        want_dtype = np.dtype(str(backend.xp.result_type(xb.dtype, mb.dtype)).split(".")[-1])
    except TypeError:
        want_dtype = None
    for name in impls_for("shift_sum", backend):
        with preferred("shift_sum", name):
            plain = portops.shift_sum(xb, step)
            assert_matches(backend, plain, ref.forward(x, step).astype(x.dtype), dtype=x.dtype)
            if want_dtype is None:
                with pytest.raises(TypeError, match="mask of dtype"):
                    portops.shift_sum(xb, step, mask=mb)
                continue
            masked = portops.shift_sum(xb, step, mask=mb)
            want = ref.forward(x, step, mask=mask).astype(want_dtype)
            assert_matches(backend, masked, want, dtype=want_dtype)
    y = backend.asarray(ref.forward(x, step).astype(x.dtype))
    got = portops.shift_sum_adjoint(y, step, channels=3)
    assert_matches(backend, got, ref.adjoint(backend.to_numpy(y), step, channels=3))
    if x.dtype.kind in "iu":
        with pytest.raises(TypeError, match="y must have a floating-point dtype"):
            portops.shift_sum_pinv(y, step, channels=3)


def test_half_precision_accumulates_in_float32(backend):
    """1 + 1e-3 * 2048 channels of float16 lose nothing when summed in float32."""
    if backend.name == "array_api_strict":
        pytest.skip("array-api-strict has no float16")
    channels = 64
    x = np.full((channels, 1, 1), 0.0625, dtype=np.float16)
    x[0] = 2048
    xb = backend.asarray(x)
    for name in impls_for("shift_sum", backend):
        with preferred("shift_sum", name):
            got = backend.to_numpy(portops.shift_sum(xb, 0))
            # float16 accumulation would stay at 2048 (the spacing there is 2).
            assert got.dtype == np.float16
            assert float(got[0, 0]) == 2052.0, name


def test_inputs_not_mutated(backend):
    x = _make(backend, (2, 3, 4, 5), np.float64)
    mask = _make(backend, (3, 4, 5), np.float64, seed=1)
    xb, mb = backend.asarray(x), backend.asarray(mask)
    y = portops.shift_sum(xb, 2, mask=mb)
    portops.shift_sum_adjoint(y, 2, channels=3, mask=mb)
    portops.shift_sum_pinv(y, 2, channels=3, mask=mb)
    np.testing.assert_array_equal(backend.to_numpy(xb), x)
    np.testing.assert_array_equal(backend.to_numpy(mb), mask)


def test_empty_width(backend):
    x = backend.asarray(np.zeros((2, 3, 4, 0)))
    y = portops.shift_sum(x, 1)
    assert tuple(y.shape) == (2, 4, 2)
    assert_matches(backend, y, np.zeros((2, 4, 2)))


@st.composite
def problems(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis, cax = draw(st.permutations(range(ndim)))[:2]
    channels = shape[cax]
    if draw(st.booleans()):
        step: Any = draw(st.integers(-3, 3))
    else:
        step = draw(st.lists(st.integers(-4, 4), min_size=channels, max_size=channels))
    mask_shape = None
    if draw(st.booleans()):
        m_ndim = draw(st.integers(1, ndim))
        mask_shape = tuple(n if draw(st.booleans()) else 1 for n in shape[ndim - m_ndim :])
    return {"shape": shape, "step": step, "axis": axis, "cax": cax, "mask_shape": mask_shape}


# The backend fixture is immutable, so sharing it across examples is safe.
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(p=problems())
def test_property_forward_and_adjoint(backend, p):
    kw = {"axis": p["axis"], "channel_axis": p["cax"]}
    x = _make(backend, p["shape"], np.float64)
    mask = None if p["mask_shape"] is None else _make(backend, p["mask_shape"], np.float64, 1)
    xb = backend.asarray(x)
    mb = None if mask is None else backend.asarray(mask)
    want = ref.forward(x, p["step"], **kw, mask=mask)
    y = _make(backend, want.shape, np.float64, 2)
    want_adj = ref.adjoint(y, p["step"], channels=p["shape"][p["cax"]], **kw, mask=mask)
    for name in impls_for("shift_sum", backend):
        with preferred("shift_sum", name):
            assert_matches(backend, portops.shift_sum(xb, p["step"], **kw, mask=mb), want)
    for name in impls_for("shift_sum_adjoint", backend):
        with preferred("shift_sum_adjoint", name):
            got = portops.shift_sum_adjoint(
                backend.asarray(y), p["step"], channels=p["shape"][p["cax"]], **kw, mask=mb
            )
            assert_matches(backend, got, want_adj)


def test_tolerance_helper_is_strict_for_float64():
    assert tolerance(np.float64)["rtol"] <= 1e-10


@pytest.fixture
def fresh_plans():
    """No shift_sum plans before or after the test: those it makes under patched
    thresholds stay with it."""
    from portops._ops import shift_sum as ops

    caches = (ops.FORWARD_PLANS, ops.ADJOINT_PLANS, ops.PINV_PLANS)
    for cache in caches:
        cache.clear()
    yield
    for cache in caches:
        cache.clear()


@pytest.fixture
def blocked_kernels(fresh_plans):
    """The NumPy kernels with one thread per byte of work: threaded whenever a call's
    blocks can be shared (force the blocked strategy with ``numpy_blocked/blocked``)."""
    from portops import _tuning
    from portops._backends.numpy import shift_sum as kernels

    with portops.threads(2), _tuning.overridden({"numpy.thread_grain": 1}):
        yield kernels


# Arrays of a few blocks, run through the blocked and threaded NumPy kernels.
LARGE = [
    pytest.param((3, 6, 40, 70), 2, -1, -3, None, id="plain"),
    pytest.param((3, 6, 40, 70), 3, -1, -3, (40, 70), id="mask2d"),
    pytest.param((3, 6, 40, 70), -1, -1, -3, (6, 40, 70), id="mask3d-negative"),
    pytest.param((2, 5, 30, 20), 7, -1, -3, (2, 5, 30, 1), id="grow-exceeds-width"),
    pytest.param((2, 5, 30, 40), [0, 9, 3, 4, 1], -1, -3, (30, 40), id="irregular"),
    pytest.param((4, 50, 30, 6), 1, -3, -1, (50, 30, 1), id="channels-last-shift-H"),
    pytest.param((6, 60, 40), 2, -1, 0, None, id="no-batch"),
    pytest.param((4, 8, 100, 120), 2, -1, -3, (100, 120), id="threaded"),
]


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), LARGE)
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_blocked_numpy_kernels_on_large_arrays(
    blocked_kernels, shape, step, axis, cax, mask_shape, strided
):
    """The blocked kernels against the generic path on arrays past the small-array cutoff."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape).astype(np.float32)
    if strided:  # a non-contiguous view with the same shape
        x = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1)
    mask = None if mask_shape is None else rng.random(mask_shape).astype(np.float32)
    kw = {"axis": axis, "channel_axis": cax, "mask": mask}
    channels = shape[cax]
    with portops.prefer(shift_sum="generic"):
        want = portops.shift_sum(x, step, **kw)
    for strategy in ("blocked", "strided"):
        with portops.prefer(shift_sum=f"numpy_blocked/{strategy}"):
            got = portops.shift_sum(x, step, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for _ in range(2):  # the default dispatch: the first call, then the signature's plan
        np.testing.assert_allclose(portops.shift_sum(x, step, **kw), want, rtol=1e-5, atol=1e-5)
    y = rng.standard_normal(want.shape).astype(np.float32)
    for op in ("shift_sum_adjoint", "shift_sum_pinv"):
        fn = getattr(portops, op)
        with portops.prefer(**{op: "generic"}):
            want_t = fn(y, step, channels=channels, **kw)
        forced = "numpy_blocked/blocked" if op == "shift_sum_adjoint" else "numpy_blocked"
        with portops.prefer(**{op: forced}):
            got_t = fn(y, step, channels=channels, **kw)
        np.testing.assert_allclose(got_t, want_t, rtol=1e-5, atol=1e-5)


# The blocked NumPy kernels on every case above, however small: units of one outer row,
# of a few rows, and of everything, so each unit boundary and the accumulator's
# wrapped columns are checked against the plain-loop reference.
EXTRA_BLOCKED_CASES = [
    pytest.param((2, 5, 3, 4), [0, 3, 3, 0, 5], -1, -3, (5, 3, 4), id="repeated-offsets"),
    pytest.param((2, 3, 4, 6, 5), 4, -2, -4, (4, 6, 1), id="grow-exceeds-width-inner"),
    pytest.param((2, 4, 3, 2), [0, 7, 2, 12], -1, -3, (3, 2), id="gaps-wider-than-width"),
    pytest.param((3, 2, 4, 3, 7), -3, -1, 1, (2, 4, 1, 7), id="split-outer-dims"),
]


@pytest.mark.parametrize(
    ("shape", "step", "axis", "cax", "mask_shape"), CASES + EXTRA_BLOCKED_CASES
)
@pytest.mark.parametrize("block", [1, 40, 1 << 20])
def test_blocked_numpy_kernels_on_every_case(
    blocked_kernels, shape, step, axis, cax, mask_shape, block
):
    """Blocks of about `block` elements (a machine whose L2 holds that few), down to
    units of one outer row."""
    channels = shape[cax]
    for dtype in (np.int64, np.float32):
        # Integers: exact sums, with nothing left over from wrapped columns.
        x = _make(None, shape, dtype) * (1000003 if dtype == np.int64 else 1)
        mask = None if mask_shape is None else _make(None, mask_shape, dtype, seed=1)
        kw = {**_kwargs(axis, cax), "mask": mask}
        with portops.machine(l2=2 * block * x.itemsize, l3=0):
            with portops.prefer(shift_sum="numpy_blocked/blocked"):
                got = portops.shift_sum(x, step, **kw)
            y = _make(None, got.shape, dtype, seed=2)
            with portops.prefer(shift_sum_adjoint="numpy_blocked/blocked"):
                got_t = portops.shift_sum_adjoint(y, step, channels=channels, **kw)
        assert got.dtype == got_t.dtype == dtype
        want = ref.forward(x, step, **kw)
        want_t = ref.adjoint(y, step, channels=channels, **kw)
        if dtype == np.int64:
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got_t, want_t)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got_t, want_t, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    ("shape", "step", "axis", "cax", "mask_shape"), CASES + EXTRA_BLOCKED_CASES + LARGE
)
def test_compiled_row_loop_on_every_case(blocked_kernels, shape, step, axis, cax, mask_shape):
    """The compiled row loop, threaded, wherever it applies (contiguous float32 or float64
    x shifted along its last axis; with the case's mask and without); elsewhere it is
    refused with its reason."""
    if blocked_kernels.row_loops() is None:
        pytest.fail("the compiled row loop was not built: pip install -e . with a C compiler")
    from portops import _tuning

    masks = [None] if mask_shape is None else [None, mask_shape]
    for dtype, shape_of_mask in itertools.product((np.float32, np.float64), masks):
        x = _make(None, shape, dtype)
        mask = None if shape_of_mask is None else _make(None, shape_of_mask, dtype, seed=1)
        kw = {**_kwargs(axis, cax), "mask": mask}
        with (
            portops.prefer(shift_sum="numpy_blocked/rows"),
            _tuning.overridden(
                {"numpy.thread_call_bytes": 1}  # two threads on every case
            ),
        ):
            if axis % len(shape) != len(shape) - 1:
                with pytest.raises(ValueError, match="shifted along its last axis"):
                    portops.shift_sum(x, step, **kw)
                continue
            got = portops.shift_sum(x, step, **kw, keepdims=True)
            report = portops.explain("shift_sum", x, step, **kw)
        assert got.dtype == dtype and (report.strategy, report.threads) == ("rows", 2)
        want = ref.forward(x, step, **kw, keepdims=True)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        assert not np.shares_memory(got, x)


@pytest.mark.parametrize(
    "mask_shape", [None, (100, 120), (8, 100, 120), (4, 1, 100, 120), (8, 100, 1)]
)
def test_compiled_row_loop_adds_as_the_slice_add_loop_does(blocked_kernels, mask_shape):
    """Bit for bit the seed's slice-add loop in float32: each product rounded, then added
    channel by channel (no fused multiply-add); masks broadcast along any axis, and of a
    bool, a reversed and a broadcast layout too."""
    if blocked_kernels.row_loops() is None:
        pytest.fail("the compiled row loop was not built: pip install -e . with a C compiler")
    x = _make(None, (4, 8, 100, 120), np.float32)
    layouts = [None]
    if mask_shape is not None:
        mask = np.random.default_rng(1).random(mask_shape, dtype=np.float32)
        layouts = [mask, mask > 0.5, mask[..., ::-1], np.broadcast_to(mask, (4, 8, 100, 120))]
    for mask in layouts:
        z = x if mask is None else x * mask
        want = np.zeros((4, 100, 120 + 14), np.float32)
        for c in range(8):
            want[..., 2 * c : 2 * c + 120] += z[:, c]
        with portops.prefer(shift_sum="numpy_blocked/rows"):
            got = portops.shift_sum(x, 2, mask=mask)
        assert portops.explain("shift_sum", x, 2, mask=mask).strategy == "rows"
        np.testing.assert_array_equal(got, want)


def test_masked_torch_forward_runs_the_row_loop_on_views(blocked_kernels):
    """A masked torch CPU forward without gradients runs the row loop on NumPy views (the
    slice-add loop's result bit for bit); with gradients it stays in torch."""
    torch = pytest.importorskip("torch")
    if blocked_kernels.row_loops() is None:
        pytest.fail("the compiled row loop was not built: pip install -e . with a C compiler")
    x = torch.from_numpy(_make(None, (4, 8, 200, 240), np.float32))
    mask = torch.rand(200, 240, generator=torch.Generator().manual_seed(0))
    assert portops.explain("shift_sum", x, 2, mask=mask).strategy == "numpy"
    assert portops.explain("shift_sum", x.numpy(), 2, mask=mask.numpy()).strategy == "rows"
    z, want = x * mask, torch.zeros(4, 200, 240 + 14)
    for c in range(8):
        want[..., 2 * c : 2 * c + 240] += z[:, c]
    assert torch.equal(portops.shift_sum(x, 2, mask=mask), want)
    xg = x.clone().requires_grad_()
    assert portops.explain("shift_sum", xg, 2, mask=mask).strategy == "slice_add"


def test_compiled_row_loop_refuses_other_byte_orders_and_unaligned_data():
    """A big-endian float32 x is not the C loop's float, nor is one at an odd address:
    both run NumPy's kernels."""
    x = _make(None, (4, 8, 100, 120), np.float32)
    unaligned = np.frombuffer(bytearray(x.nbytes + 1), np.float32, x.size, offset=1)
    unaligned = unaligned.reshape(x.shape)
    unaligned[...] = x
    for other in (x.astype(x.dtype.newbyteorder()), unaligned):
        assert portops.explain("shift_sum", other, 2).strategy != "rows"
        want = ref.forward(x, 2)
        np.testing.assert_allclose(portops.shift_sum(other, 2), want, rtol=1e-5, atol=1e-5)


def test_without_the_compiled_row_loop_the_other_kernels_run(monkeypatch):
    """Where the extension was not built, NumPy and torch keep their own kernels."""
    from portops._backends.numpy import shift_sum as kernels

    monkeypatch.setattr(kernels, "row_loops", lambda: None)
    x = _make(None, (4, 8, 100, 120), np.float32)
    assert portops.explain("shift_sum", x, 2).strategy == "blocked"
    with pytest.raises(ValueError, match="was not built here"):
        with portops.prefer(shift_sum="numpy_blocked/rows"):
            portops.shift_sum(x, 2)
    np.testing.assert_allclose(portops.shift_sum(x, 2), ref.forward(x, 2), rtol=1e-5, atol=1e-5)
    torch = pytest.importorskip("torch")
    assert portops.explain("shift_sum", torch.from_numpy(x), 2).strategy == "slice_add"


def _every_thread_gets_the_reference(xs: list, masks: list, calls: int) -> bool:
    """Whether `calls` shift_sums of each (x, mask), one thread per pair, all equal the
    reference."""
    from concurrent.futures import ThreadPoolExecutor

    want = [ref.forward(x, 2, mask=m) for x, m in zip(xs, masks, strict=True)]

    def run(i: int) -> bool:
        return all(
            np.array_equal(portops.shift_sum(xs[i], 2, mask=masks[i]), want[i])
            for _ in range(calls)
        )

    with ThreadPoolExecutor(len(xs)) as pool:
        return all(pool.map(run, range(len(xs))))


def test_blocked_numpy_kernels_from_many_threads(blocked_kernels):
    """Concurrent calls share the thread pool: each gets its own, complete result.
    (Settings the calling threads do not inherit are process-wide here: the blocked
    forward for every x, blocks of about 200 elements.)"""
    from portops import _tuning

    rng = np.random.default_rng(5)
    xs = [rng.integers(-9, 10, size=(3, 4, 20, 30 + i)) for i in range(6)]
    masks = [None, rng.integers(0, 2, size=(20, 30 + 1)), None, None, None, None]
    block = 1600 / portops.machine().l2  # of an L2: 200 int64 elements
    with _tuning.overridden({"numpy.loop_rows": 0, "numpy.forward_block_l2": block}):
        assert _every_thread_gets_the_reference(xs, masks, calls=5)


# Small inputs on both sides of the forward's crossovers: the sheared sum (few rows per
# channel, evenly spaced offsets or not, with inner dims), the slice-add loop (padding
# past sheared_growth * W) and the blocked kernel (many rows), through the default
# dispatch (cached plans) and the kernel called directly; channels first and last,
# with and without masks, real and complex masks on real inputs.
CROSSOVER = [
    pytest.param((1, 3, 4, 5), 1, -1, -3, None, "sheared", id="few-rows"),
    pytest.param((1, 3, 4, 5), 2, -1, -3, (4, 5), "sheared", id="few-rows-mask"),
    pytest.param((2, 4, 3, 7), -2, -1, -3, (3, 7), "sheared", id="few-rows-negative-step"),
    pytest.param((2, 4, 3, 7), [0, 3, 1, 6], -1, -3, None, "sheared", id="few-rows-irregular"),
    pytest.param((2, 3, 5, 4), 1, -2, -3, (3, 5, 4), "sheared", id="few-rows-inner-dims"),
    pytest.param((1, 4, 5, 3), 1, -2, -1, (4, 5, 1), "sheared", id="few-rows-channels-last-mask"),
    pytest.param((2, 4, 5, 3), 2, -2, -1, None, "sheared", id="few-rows-channels-last"),
    pytest.param((1, 3, 4, 5, 6), 1, -3, -4, (4, 1, 6), "sheared", id="few-rows-mask-some-inner"),
    pytest.param((1, 5, 3, 2), 2, -1, -3, (3, 2), "loop", id="padding-past-growth"),
    pytest.param((1, 3, 4, 2), 7, -2, -1, None, "sheared", id="channels-last-padding-2w"),
    pytest.param((1, 3, 4, 2), 9, -2, -1, (3, 4, 1), "loop", id="channels-last-past-2w"),
    pytest.param((2, 3, 80, 5), 1, -1, -3, (80, 5), "blocked", id="many-rows-mask"),
    pytest.param((2, 3, 80, 5), 2, -1, -3, None, "blocked", id="many-rows"),
    pytest.param((2, 80, 5, 3), 1, -2, -1, (80, 5, 1), "strided", id="many-rows-last-mask"),
    pytest.param((2, 80, 5, 3), 3, -2, -1, None, "strided", id="many-rows-channels-last"),
]


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape", "kind"), CROSSOVER)
@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.int64])
@pytest.mark.parametrize("row_chunks", [False, True], ids=["whole", "row-chunks"])
def test_numpy_forward_on_both_sides_of_the_crossovers(
    shape, step, axis, cax, mask_shape, kind, dtype, row_chunks
):
    # row_chunks: strided rows transposed one row at a time (an L1 of two bytes)
    with portops.machine(l1=2) if row_chunks else contextlib.nullcontext():
        _both_sides(shape, step, axis, cax, mask_shape, kind, dtype)


def _both_sides(shape, step, axis, cax, mask_shape, kind, dtype):
    from portops._backends.numpy import shift_sum as kernels
    from portops._ops.shift_sum import ShiftSumArgs

    ndim = len(shape)
    offsets = tuple(ref.offsets_of(step, shape[cax]))
    x = _make(None, shape, np.float32 if dtype == np.complex64 else dtype)
    mask = None if mask_shape is None else _make(None, mask_shape, dtype, seed=1)
    kw = {**_kwargs(axis, cax), "mask": mask}
    want = ref.forward(x, step, **kw)
    x_before = x.copy()
    # The same values in a non-contiguous layout too (the plan is shared by both).
    strided = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1)
    for xin in (x, x, strided):  # the second call runs the cached plan
        got = portops.shift_sum(xin, step, **kw)
        assert got.dtype == np.result_type(x, mask if mask is not None else x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, x_before)
    # The kernels themselves: the sheared sum adds in the slice-add loop's order.
    m = None if mask is None else mask.reshape((1,) * (ndim - mask.ndim) + mask.shape)
    a = ShiftSumArgs.make("forward", x, offsets, axis % ndim, cax % ndim, m, False, np)
    rows = kernels.rows_apply(a) is None  # the compiled row loop, where it takes the call
    assert kernels.choose_forward(a)[0] == ("rows" if kind == "blocked" and rows else kind)
    for name in ("blocked", "strided", "rows") if rows else ("blocked", "strided"):
        np.testing.assert_allclose(kernels.forward_plan(a, name)(x, m), want, rtol=1e-5, atol=1e-5)
    if kind == "sheared":
        sheared = kernels.forward_plan(a, "sheared")(x, m)
        np.testing.assert_array_equal(sheared, kernels.forward_plan(a, "loop")(x, m))


@pytest.mark.parametrize("l2", [1 << 10, 1 << 20])
def test_sheared_sum_buffers_switch_between_geometries(monkeypatch, l2):
    """Calls that alternate between more shapes than the buffers kept (one of them in a
    1 KiB cache, all in 1 MiB) stay right."""
    from portops._backends.numpy import shift_sum as kernels

    monkeypatch.delattr(kernels._local, "sheared", raising=False)  # this thread's buffers
    xs = [_make(None, (1, 3, 4, 5 + i), np.float32, seed=i) for i in range(3)]
    masks = [None, _make(None, (4, 6), np.float32, seed=9), None]
    with portops.machine(l2=l2, l3=0):
        for _ in range(2):
            for x, mask in zip(xs, masks, strict=True):
                assert portops.explain("shift_sum", x, 2, mask=mask).strategy == "sheared"
                got = portops.shift_sum(x, 2, mask=mask)
                want = ref.forward(x, 2, mask=mask)
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        kept = kernels._local.sheared
        assert len(kept) == (1 if l2 < 1 << 20 else 3)
        assert kernels._local.sheared_bytes == sum(s.nbytes for s in kept.values())


def test_forced_small_array_strategies_keep_no_large_buffer(monkeypatch):
    """A thread keeps buffers up to twice the cache a block fills: the loop or the sheared
    sum forced on a larger x leaves no buffer of x's size behind."""
    from portops._backends.numpy import shift_sum as kernels

    for slot in ("masked", "sheared"):
        monkeypatch.delattr(kernels._local, slot, raising=False)
    x, mask = _make(None, (1, 4, 32, 64), np.float32), _make(None, (32, 64), np.float32, seed=1)
    with portops.machine(l2=1 << 10, l3=0):
        for strategy in ("loop", "sheared"):
            with portops.prefer(shift_sum=f"numpy_blocked/{strategy}"):
                got = portops.shift_sum(x, 2, mask=mask)
            np.testing.assert_allclose(got, ref.forward(x, 2, mask=mask), rtol=1e-5, atol=1e-5)
    assert getattr(kernels._local, "masked", None) is None
    assert not getattr(kernels._local, "sheared", {})


def test_small_masked_forward_results_do_not_share_its_buffer():
    """The loop's masked product goes to a reused buffer: results never alias it."""
    x = _make(None, (1, 3, 4, 5), np.float32)
    m1, m2 = _make(None, (4, 5), np.float32, seed=1), _make(None, (4, 5), np.float32, seed=2)
    first = portops.shift_sum(x, 1, mask=m1)
    kept = first.copy()
    second = portops.shift_sum(x * 2, 1, mask=m2)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(second, ref.forward(x * 2, 1, mask=m2), rtol=1e-5, atol=1e-5)


def test_small_masked_forward_from_many_threads():
    """Each thread has its own buffer for the masked product."""
    rng = np.random.default_rng(6)
    xs = [rng.integers(-9, 10, size=(1, 3, 6, 7 + i)) for i in range(6)]
    masks = [rng.integers(0, 3, size=(6, 7 + i)) for i in range(6)]
    assert _every_thread_gets_the_reference(xs, masks, calls=20)


@pytest.mark.parametrize("strategy", ["slice_add", "numpy"])
@pytest.mark.parametrize(
    ("shape", "step", "axes", "mask_shape", "dtype"),
    [
        ((2, 5, 6, 7), 2, {}, None, "float32"),
        ((2, 5, 6, 7), 1, {}, (6, 7), "float64"),
        ((1, 6, 7, 4), 3, {"axis": -2, "channel_axis": -1}, (6, 1, 4), "float32"),
        ((3, 4, 9), (0, 2, 5, 7), {"axis": -1, "channel_axis": -2}, (4, 9), "complex128"),
        ((2, 3, 5, 6), -1, {}, (3, 1, 6), "float64"),
    ],
)
def test_torch_forward_either_kernel(fresh_plans, strategy, shape, step, axes, mask_shape, dtype):
    """torch CPU forward without gradients: NumPy's kernels on views and torch's
    slice-adds give the reference, with and without a mask, keepdims too, on both
    layouts of rows; inputs are not modified."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(dtype)
    mask = None if mask_shape is None else rng.uniform(size=mask_shape).astype(dtype)
    tm = None if mask is None else torch.from_numpy(mask.copy())
    strided = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1)
    for layout in (x, strided):
        tx = torch.from_numpy(layout.copy() if layout is x else layout)
        for keepdims in (False, True):
            want = ref.forward(x, step, mask=mask, keepdims=keepdims, **axes)
            for _ in range(2):  # the first call, then the signature's plan
                with portops.prefer(shift_sum=f"torch/{strategy}"):
                    got = portops.shift_sum(tx, step, mask=tm, keepdims=keepdims, **axes)
                assert isinstance(got, torch.Tensor) and got.dtype == tx.dtype
                np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(tx.numpy(), layout)


def test_blocks_split_the_first_dim_longer_than_one():
    """A batch of one is indexed, and the rows below it are split among the workers."""
    from portops._backends.numpy import shift_sum as kernels

    units = kernels._blocks((1, 256), 2048, 1 << 20, workers=2)
    assert units == [((0,), slice(0, 128)), ((0,), slice(128, 256))]
    assert kernels._blocks((1, 256), 2048, 1 << 20, workers=1) == [((0,), slice(0, 256))]
    # Every row in exactly one unit, with more dims of one.
    units = kernels._blocks((1, 1, 5, 7), 3, 10, workers=2)
    rows = [(p, r) for p, sl in units for r in range(7)[sl]]
    assert sorted(rows) == [((0, 0, i), r) for i in range(5) for r in range(7)]
