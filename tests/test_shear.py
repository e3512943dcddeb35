"""shear and unshear: every implementation, every backend, the published definitions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import shear_reference as ref
import shift_sum_reference as sref
from backends import Backend, assert_matches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import portops


def impls_for(op: str, backend: Backend) -> list[str]:
    """Names of every implementation of `op` registered for this backend."""
    return [
        i["name"]
        for i in portops.implementations(op)
        if (i["libraries"] is None or backend.library in i["libraries"])
        and (i["devices"] is None or backend.device in i["devices"])
    ]


def _make(shape: Any, dtype: Any, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-5, 6, size=shape).astype(dtype)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _integer(step: Any) -> bool:
    return all(isinstance(s, int) for s in (step if isinstance(step, list) else [step]))


def _wide_shape(shape: tuple[int, ...], step: Any, axis: int, cax: int) -> tuple[int, ...]:
    return ref.shear(np.zeros(shape), step, axis=axis, channel_axis=cax).shape


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
    pytest.param((2, 3, 4, 3, 5), -2, -1, -3, (3, 5), id="negative-step-two-batch-dims"),
    pytest.param((4, 2, 3, 5), -1, -1, 0, None, id="channels-then-batch-negative"),
    pytest.param((2, 4, 3, 5), [0, 3, 1, 6], -1, -3, (4, 1, 5), id="irregular-offsets"),
    pytest.param((2, 4, 5, 3), 1, -2, -3, (4, 5, 3), id="shift-along-H"),
    pytest.param((5, 3, 4), 2, -2, -1, (5, 3, 1), id="channels-last"),
    pytest.param((5, 3, 4), -2, -2, -1, None, id="channels-last-negative"),
    pytest.param((4, 3, 2, 5), 1, -1, 0, (4, 1, 1, 5), id="channels-first-axis0"),
    pytest.param((3, 2, 5), 1, 0, 1, None, id="shift-axis0"),
    pytest.param((2, 4, 1, 5), 2, -1, -3, None, id="one-row"),
    pytest.param((2, 4, 2, 5), 2, -1, -3, None, id="two-rows"),
    pytest.param((2, 3, 4, 2), 5, -1, -3, (4, 2), id="grow-exceeds-width"),
    pytest.param((2, 4, 3, 5), 0.5, -1, -3, (3, 5), id="fractional-half"),
    pytest.param((2, 4, 3, 5), -0.75, -1, -3, None, id="fractional-negative"),
    pytest.param((3, 2, 4), [0, 1.5, 0.25], -1, 0, (3, 1, 4), id="fractional-irregular"),
    pytest.param((5, 3, 3), 1.5, -2, -1, None, id="fractional-channels-last"),
]


def _arrays(backend, shape, step, axis, cax, mask_shape, dtype=np.float64):
    x = _make(shape, dtype)
    mask = None if mask_shape is None else _make(mask_shape, dtype, seed=1)
    y = _make(_wide_shape(shape, step, axis, cax), dtype, seed=2)
    xb, yb = backend.asarray(x), backend.asarray(y)
    mb = None if mask is None else backend.asarray(mask)
    return x, mask, y, xb, mb, yb


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_every_implementation_matches_the_reference(backend, shape, step, axis, cax, mask_shape):
    x, mask, y, xb, mb, yb = _arrays(backend, shape, step, axis, cax, mask_shape)
    kw = {"axis": axis, "channel_axis": cax}
    want = ref.shear(x, step, **kw, mask=mask)
    want_t = ref.unshear(y, step, **kw, mask=mask)
    for name in impls_for("shear", backend):
        with portops.prefer(shear=name):
            assert_matches(backend, portops.shear(xb, step, **kw, mask=mb), want)
    for name in impls_for("unshear", backend):
        with portops.prefer(unshear=name):
            assert_matches(backend, portops.unshear(yb, step, **kw, mask=mb), want_t)


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_dot_test_and_left_inverse(backend, shape, step, axis, cax, mask_shape):
    """<shear x, y> == <x, unshear y> to 1e-12 (complex128), and unshear(shear(x)) == x."""
    kw = {"axis": axis, "channel_axis": cax}
    x, _mask, y, xb, mb, yb = _arrays(backend, shape, step, axis, cax, mask_shape, np.complex128)
    for s_name in impls_for("shear", backend):
        for u_name in impls_for("unshear", backend):
            with portops.prefer(shear=s_name, unshear=u_name):
                sx = backend.to_numpy(portops.shear(xb, step, **kw, mask=mb))
                uy = backend.to_numpy(portops.unshear(yb, step, **kw, mask=mb))
                back = portops.unshear(portops.shear(xb, step, **kw), step, **kw)
            lhs, rhs = np.vdot(sx, y), np.vdot(x, uy)
            assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), abs(rhs), 1e-300), (s_name, u_name)
            if _integer(step):
                np.testing.assert_array_equal(backend.to_numpy(back), x)


@pytest.mark.parametrize(
    ("shape", "step", "axis", "cax", "mask_shape"), [c for c in CASES if _integer(c.values[1])]
)
def test_summed_shear_is_shift_sum(backend, shape, step, axis, cax, mask_shape):
    x, mask, _y, xb, mb, _yb = _arrays(backend, shape, step, axis, cax, mask_shape)
    kw = {"axis": axis, "channel_axis": cax}
    summed = backend.to_numpy(portops.shear(xb, step, **kw, mask=mb)).sum(axis=cax)
    np.testing.assert_allclose(summed, sref.forward(x, step, **kw, mask=mask), rtol=1e-12)


def test_numpy_gaps_are_zeroed_in_reused_memory(monkeypatch):
    """Results from a buffer full of NaN: every element outside the windows is written."""
    from portops import _buffers

    monkeypatch.setattr(_buffers, "empty", lambda shape, dtype: np.full(shape, np.nan, dtype))
    for case in CASES:
        shape, step, axis, cax, mask_shape = case.values
        x = _make(shape, np.float64)
        mask = None if mask_shape is None else _make(mask_shape, np.float64, seed=1)
        want = ref.shear(x, step, axis=axis, channel_axis=cax, mask=mask)
        got = portops.shear(x, step, axis=axis, channel_axis=cax, mask=mask)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15, err_msg=case.id)


def test_torch_gaps_are_zeroed_in_reused_memory(monkeypatch):
    torch = pytest.importorskip("torch")
    from portops._backends.torch import shear as kernels

    def nan_empty(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(kernels, "_empty", nan_empty)
    for case in CASES:
        shape, step, axis, cax, mask_shape = case.values
        x = _make(shape, np.float64)
        mask = None if mask_shape is None else torch.from_numpy(_make(mask_shape, np.float64, 1))
        want = ref.shear(x, step, axis=axis, channel_axis=cax, mask=mask)
        got = portops.shear(torch.from_numpy(x), step, axis=axis, channel_axis=cax, mask=mask)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15, err_msg=case.id)


# ---------------------------------------------------------------- published definitions


def test_mst_shift_is_shear(backend):
    """MST's simulation ``shift``, and CST/DAUHST's ``shift_3d`` on a zero-padded cube."""
    x = _make((2, 28, 8, 8), np.float64)
    got = backend.to_numpy(portops.shear(backend.asarray(x), 2))
    np.testing.assert_array_equal(got, ref.mst_shift(x, 2))
    padded = np.concatenate([x, np.zeros((2, 28, 8, 27 * 2))], axis=3)
    np.testing.assert_array_equal(got, ref.dauhst_shift_3d(padded, 2))


def test_shift_back_4d_is_unshear(backend):
    """MST / MST++ / BiSRNet ``shift_back`` on the 4-D cube, and CST/DAUHST's roll back."""
    y = _make((2, 28, 8, 8 + 27 * 2), np.float64)
    got = backend.to_numpy(portops.unshear(backend.asarray(y), 2))
    # With 256 rows the MST function uses the full step of 2.
    y256 = _make((1, 28, 256, 256 + 27 * 2), np.float64)
    np.testing.assert_array_equal(portops.unshear(y256, 2), ref.mst_shift_back_4d(y256, 2))
    np.testing.assert_array_equal(got, ref.dauhst_shift_back_3d(y, 2)[..., :8])


@pytest.mark.parametrize("rows", [128, 64])
def test_mst_down_sampled_shift_back_takes_its_offsets(rows):
    """At rows = 256 / d MST steps by ``int(2 / d^2 * i)``: irregular offsets."""
    offsets = [int(2 / (256 // rows) ** 2 * i) for i in range(28)]
    y = _make((1, 28, rows, rows + max(offsets)), np.float32)
    np.testing.assert_array_equal(portops.unshear(y, offsets), ref.mst_shift_back_4d(y, 2))


def test_dauhst_y_shift_is_shear_of_the_adjoint(backend):
    """DAUHST's ``y_shift`` (``shift(shift_back(y))``) is shear(shift_sum_adjoint(y))."""
    y = _make((2, 8, 8 + 27 * 2), np.float64)
    yb = backend.asarray(y)
    cube = portops.shift_sum_adjoint(yb, 2, channels=28)
    got = backend.to_numpy(portops.shear(cube, 2))
    np.testing.assert_array_equal(got, ref.dauhst_y_shift(y, 28, 2))
    # ... and MST's 3-D shift_back is the adjoint itself.
    np.testing.assert_array_equal(backend.to_numpy(cube), ref.mst_shift_back_3d(y))


# ---------------------------------------------------------------- dtypes and errors

DTYPES = ["float32", "float64", "complex64", "complex128", "int32", "int64", "float16"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(backend, dtype):
    if dtype == "float16" and backend.name == "array_api_strict":
        pytest.skip("array-api-strict has no float16")
    x = _make((2, 3, 4, 5), dtype)
    xb = backend.asarray(x)
    for name in impls_for("shear", backend):
        with portops.prefer(shear=name, unshear=name):
            y = portops.shear(xb, 2)
            assert_matches(backend, y, ref.shear(x, 2).astype(x.dtype), dtype=x.dtype)
            assert_matches(backend, portops.unshear(y, 2), x, dtype=x.dtype)
            if dtype.startswith("int"):
                with pytest.raises(TypeError, match="floating-point dtype for a fractional"):
                    portops.shear(xb, 0.5)
            else:
                got = portops.shear(xb, 0.5)
                want = ref.shear(x.astype(np.float64 if "c" not in dtype else complex), 0.5)
                assert_matches(backend, got, want.astype(x.dtype), dtype=x.dtype)


def test_inputs_not_mutated(backend):
    x = _make((2, 3, 4, 5), np.float64)
    mask = _make((3, 4, 5), np.float64, seed=1)
    xb, mb = backend.asarray(x), backend.asarray(mask)
    for step in (2, [0, 2, 1], 0.5):
        y = portops.shear(xb, step, mask=mb)
        portops.unshear(y, step, mask=mb)
    np.testing.assert_array_equal(backend.to_numpy(xb), x)
    np.testing.assert_array_equal(backend.to_numpy(mb), mask)


X = np.ones((2, 3, 4, 5))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: portops.shear(X, "2"), TypeError, "step must be an integer or a sequence"),
        (lambda: portops.shear(X, True), TypeError, "step must be an integer or a sequence"),
        (lambda: portops.shear(X, [0, True, 0.5]), TypeError, "step must contain numbers"),
        (lambda: portops.shear(X, [0, 1]), ValueError, "step has 2 offsets but there are 3"),
        (lambda: portops.shear(X, [0, 1.5]), ValueError, "step has 2 offsets but there are 3"),
        (lambda: portops.shear(X, [0, "a", 1]), TypeError, "step must contain integers"),
        (lambda: portops.shear(X, float("nan")), ValueError, "step must be finite"),
        (lambda: portops.shear(X, []), ValueError, "at least one offset"),
        (lambda: portops.shear(X, 1, axis=1), ValueError, "name the same axis"),
        (lambda: portops.shear(X, 1, mask=np.ones((3, 5))), ValueError, "does not broadcast"),
        (lambda: portops.shear([[1.0]], 1), TypeError, "x must be an array"),
        (lambda: portops.shear(X.astype(int), 0.5), TypeError, "for a fractional step"),
        (lambda: portops.unshear(X, 3), ValueError, "y is too narrow"),
        (lambda: portops.unshear(X, 3.5), ValueError, "y is too narrow"),
        (lambda: portops.unshear(np.ones(3), 1), ValueError, "y must have at least 2"),
    ],
)
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------- properties


@st.composite
def problems(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis, cax = draw(st.permutations(range(ndim)))[:2]
    channels = shape[cax]
    kind = draw(st.sampled_from(["int", "list", "real"]))
    step: Any
    if kind == "int":
        step = draw(st.integers(-3, 3))
    elif kind == "list":
        step = draw(st.lists(st.integers(-4, 4), min_size=channels, max_size=channels))
    else:
        step = draw(st.sampled_from([0.5, -0.5, 0.25, 1.5, -1.25]))
    mask_shape = None
    if draw(st.booleans()):
        m_ndim = draw(st.integers(1, ndim))
        mask_shape = tuple(n if draw(st.booleans()) else 1 for n in shape[ndim - m_ndim :])
    return {"shape": shape, "step": step, "axis": axis, "cax": cax, "mask_shape": mask_shape}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(p=problems())
def test_property_shear_and_unshear(backend, p):
    kw = {"axis": p["axis"], "channel_axis": p["cax"]}
    step = p["step"]
    x, mask, y, xb, mb, yb = _arrays(
        backend, p["shape"], step, p["axis"], p["cax"], p["mask_shape"]
    )
    want = ref.shear(x, step, **kw, mask=mask)
    want_t = ref.unshear(y, step, **kw, mask=mask)
    for name in impls_for("shear", backend):
        with portops.prefer(shear=name, unshear=name):
            sx = portops.shear(xb, step, **kw, mask=mb)
            assert_matches(backend, sx, want)
            assert_matches(backend, portops.unshear(yb, step, **kw, mask=mb), want_t)
        lhs, rhs = np.vdot(backend.to_numpy(sx), y), np.vdot(x, want_t)
        assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), abs(rhs), 1.0)


@pytest.mark.parametrize("block_bytes", [1, 40, 200, 500])
@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_numpy_blocks_over_threads(monkeypatch, shape, step, axis, cax, mask_shape, block_bytes):
    """The NumPy kernels cut into blocks (channels split between blocks, rows, or whole
    where the shifted axis comes first) over threads, on every case however small."""
    from portops import _buffers, _tuning

    # Results start as NaN, so that an element left unwritten shows.
    monkeypatch.setattr(_buffers, "empty", lambda s, d: np.full(s, np.nan, dtype=d))
    x, mask, y, *_ = _arrays(Backend("numpy"), shape, step, axis, cax, mask_shape)
    kw = {"axis": axis, "channel_axis": cax, "mask": mask}
    # Blocks of about `block_bytes` (half of an L2 that small), one thread per byte.
    with portops.threads(3), portops.machine(l2=2 * block_bytes):
        with _tuning.overridden({"numpy.thread_grain": 1}):
            got, got_t = portops.shear(x, step, **kw), portops.unshear(y, step, **kw)
    np.testing.assert_allclose(got, ref.shear(x, step, **kw), rtol=1e-14)
    np.testing.assert_allclose(got_t, ref.unshear(y, step, **kw), rtol=1e-14)


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
def test_cupy_strided_kernels_on_numpy(shape, step, axis, cax, mask_shape):
    """The strided kernels CuPy runs, checked here with NumPy as the library (they are
    written against the API the two share), so they are tested without a GPU."""
    from portops._ops.shear import _prepare_shear, _prepare_unshear
    from portops._shear import strided

    x, mask, y, *_ = _arrays(Backend("numpy"), shape, step, axis, cax, mask_shape)
    kw = {"axis": axis, "channel_axis": cax, "mask": mask}

    def empty(shape: list[int], dtype: Any) -> np.ndarray:
        return np.full(shape, np.nan, dtype=dtype)  # every element must be written

    args = _prepare_shear(x, step, **kw).args
    ops = strided.numpy_like(np)
    np.testing.assert_allclose(strided.shear(ops, empty, args), ref.shear(x, step, **kw))
    args = _prepare_unshear(y, step, **kw).args
    np.testing.assert_allclose(strided.unshear(ops, empty, args), ref.unshear(y, step, **kw))
