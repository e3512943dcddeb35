"""portops.vecdot against numpy.vecdot (and a plain reference for complex) on every
backend and every registered implementation."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from backends import SPECS, Backend, assert_matches, forced, strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import portops

# The specialised implementation registered for each backend, if any.
NATIVE = {
    "numpy": "numpy",
    "numpy_readonly": "numpy",
    "torch": "torch_cpu",
    "torch_cuda": "torch_cuda",
    "cupy": "cupy",
}


def impl_params(backend_name: str) -> list[str]:
    """Which implementations run for `backend_name` (the ``impl`` parameter, paired with
    the backend by conftest): the dispatcher's choice, the generic one, and each
    strategy of the backend's specialised implementation, forced (every strategy is
    checked against the same reference, on every case it applies to)."""
    spec = SPECS[backend_name]
    native = NATIVE.get(backend_name)
    found = strategies("vecdot", spec.library, spec.device).get(native or "", [])
    return ["auto", "generic", *(f"{native}/{name}" for name in found)]


def run(backend: Backend, impl: str, x1: Any, x2: Any, **kw: Any) -> Any:
    if impl == "auto":
        return portops.vecdot(x1, x2, **kw)
    with forced("vecdot", impl):
        return portops.vecdot(x1, x2, **kw)


def reference(a: np.ndarray, b: np.ndarray, axis: int = -1, keepdims: bool = False) -> Any:
    """numpy.vecdot in float64 (or a plain conj-multiply-sum for complex)."""
    if np.iscomplexobj(a) or np.iscomplexobj(b):
        a, b = np.broadcast_arrays(a.astype(np.complex128), b.astype(np.complex128))
        r = np.sum(np.conj(a) * b, axis=axis)
    else:
        r = np.vecdot(a.astype(np.float64), b.astype(np.float64), axis=axis)
    r = np.asarray(r)
    return np.expand_dims(r, axis) if keepdims else r


def random(shape: tuple[int, ...], dtype: Any = np.float64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 4, size=shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


# (x1 shape, x2 shape, axis): long (>= 64) and short vectors hit every internal path.
CASES = [
    ((4, 70), (4, 70), -1),
    ((4, 5), (4, 5), -1),
    ((3, 1, 70), (5, 70), -1),  # broadcasting
    ((70,), (2, 3, 70), -1),
    ((2, 3, 70), (70,), -1),
    ((6, 5), (6, 5), -2),  # non-last axes
    ((6, 80), (6, 80), 0),
    ((2, 70, 3), (70, 3), -2),
    ((2, 1, 70, 3), (4, 70, 1), -2),
    ((4, 0), (4, 0), -1),  # empty reduction axis
    ((0, 70), (0, 70), -1),  # empty batch
    ((7,), (7,), -1),  # 0-d result
    ((100,), (100,), 0),
]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize(("s1", "s2", "axis"), CASES)
def test_matches_numpy(backend: Backend, impl: str, s1, s2, axis, keepdims) -> None:
    a, b = random(s1, seed=1), random(s2, seed=2)
    x1, x2 = backend.asarray(a), backend.asarray(b)
    got = run(backend, impl, x1, x2, axis=axis, keepdims=keepdims)
    want = reference(a, b, axis=axis if axis < 0 else axis - len(s1), keepdims=keepdims)
    assert_matches(backend, got, want, dtype=np.float64)
    # Inputs untouched (numpy_readonly also raises on any write).
    np.testing.assert_array_equal(backend.to_numpy(x1), a)
    np.testing.assert_array_equal(backend.to_numpy(x2), b)


DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


def make(backend: Backend, a: np.ndarray) -> Any:
    try:
        return backend.asarray(a)
    except (TypeError, ValueError) as exc:  # e.g. array-api-strict has no float16
        pytest.skip(f"{backend.name} cannot hold {a.dtype}: {exc}")


@pytest.mark.parametrize("length", [5, 70])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes(backend: Backend, impl: str, dtype, length: int) -> None:
    if impl == "generic" and backend.library == "torch" and np.dtype(dtype).itemsize > 1:
        if np.dtype(dtype).kind == "u":
            pytest.skip("torch has no sum kernel for uint16/32/64 (portops' own computes in int64)")
    a, b = random((3, 4, length), dtype, 1), random((4, length), dtype, 2)
    x1, x2 = make(backend, a), make(backend, b)
    got = run(backend, impl, x1, x2)
    if np.dtype(dtype).kind in "iu":
        # Integer results wrap around like the dtype (exact modular arithmetic).
        want = np.vecdot(a.astype(np.int64), b.astype(np.int64)).astype(dtype)
    else:
        want = reference(a, b)
    assert_matches(backend, got, want, dtype=dtype)


@pytest.mark.parametrize("axis", [-1, -2])
def test_half_accumulates_in_float32(backend: Backend, impl: str, axis: int) -> None:
    # Summing 4096 ones in float16 would stop at 2048; 4096 itself is representable.
    shape = (4096, 3) if axis == -2 else (3, 4096)
    x = make(backend, np.ones(shape, np.float16))
    got = run(backend, impl, x, x, axis=axis)
    assert_matches(backend, got, np.full(3, 4096.0), dtype=np.float16)


def test_bfloat16(backend: Backend, impl: str) -> None:
    if backend.library not in ("torch", "jax"):
        pytest.skip("bfloat16 is a torch/jax dtype")
    a, b = random((5, 300), np.float32, 1), random((300,), np.float32, 2)
    x1, x2 = backend.asarray(a), backend.asarray(b)
    if backend.library == "torch":
        import torch

        bf16, f32 = torch.bfloat16, torch.float32
        x1, x2 = x1.to(bf16), x2.to(bf16)
        ones = torch.ones(2, 4096, dtype=bf16, device=x1.device)
    else:
        import jax.numpy as jnp

        bf16, f32 = jnp.bfloat16, jnp.float32
        x1, x2 = x1.astype(bf16), x2.astype(bf16)
        ones = jnp.ones((2, 4096), dtype=bf16)

    def values(x: Any) -> np.ndarray:  # NumPy has no bfloat16
        return np.asarray(backend.to_numpy(backend.xp.astype(x, f32)), np.float64)

    got = run(backend, impl, x1, x2)
    assert got.dtype == bf16
    np.testing.assert_allclose(values(got), reference(values(x1), values(x2)), rtol=2e-2, atol=0.3)
    # 4096 ones: a bfloat16 running sum would stop at 256.
    np.testing.assert_array_equal(values(run(backend, impl, ones, ones)), [4096.0, 4096.0])


def test_mixed_dtypes_promote(backend: Backend, impl: str) -> None:
    a, b = random((3, 70), np.float32, 1), random((70,), np.float64, 2)
    got = run(backend, impl, backend.asarray(a), backend.asarray(b))
    assert_matches(backend, got, reference(a, b), dtype=np.float64)


@pytest.mark.parametrize("other", [np.float64, np.complex64], ids=str)
def test_half_with_a_wider_dtype(backend: Backend, impl: str, other) -> None:
    a, b = random((40, 3), np.float16, 1), random((40, 3), other, 2)
    got = run(backend, impl, make(backend, a), make(backend, b))
    assert_matches(backend, got, reference(a, b), dtype=np.result_type(a, b))


def test_complex_conjugates_first_argument(backend: Backend, impl: str) -> None:
    a = np.array([[1j, 2.0, 0.0], [1.0, 1.0, 1j]])
    b = np.array([[1j, 1.0, 5.0], [1j, 1j, 1j]])
    got = run(backend, impl, backend.asarray(a), backend.asarray(b))
    assert_matches(backend, got, np.array([3.0 + 0j, 1.0 + 2j]))


@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_non_contiguous(backend: Backend, impl: str, layout: str) -> None:
    a, b = random((8, 160), seed=1), random((8, 160), seed=2)
    x1, x2 = backend.asarray(a), backend.asarray(b)
    xp = backend.xp
    if layout == "sliced":
        x1, x2, axis = x1[::2, ::2], x2[1::2, ::2], -1
        want = reference(a[::2, ::2], b[1::2, ::2])
    else:  # the contracted axis is the strided one
        x1, x2, axis = xp.permute_dims(x1, (1, 0)), xp.permute_dims(x2, (1, 0)), -2
        want = reference(a.T, b.T, axis=-2)
    assert_matches(backend, run(backend, impl, x1, x2, axis=axis), want)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    length=st.sampled_from([0, 1, 3, 64, 70]),
    position=st.integers(0, 3),
    keepdims=st.booleans(),
)
def test_shapes_property(backend: Backend, impl: str, shapes, length, position, keepdims) -> None:
    s1, s2 = shapes.input_shapes
    k = min(position, len(s1), len(s2))  # vector axis inserted k dims from the end
    s1 = (*s1[: len(s1) - k], length, *s1[len(s1) - k :])
    s2 = (*s2[: len(s2) - k], length, *s2[len(s2) - k :])
    axis = -1 - k
    a, b = random(s1, seed=1), random(s2, seed=2)
    got = run(backend, impl, backend.asarray(a), backend.asarray(b), axis=axis, keepdims=keepdims)
    assert_matches(backend, got, reference(a, b, axis=axis, keepdims=keepdims))


# -- errors -----------------------------------------------------------------------------


def test_errors_name_the_argument(backend: Backend) -> None:
    x = backend.asarray(np.ones((3, 4)))
    with pytest.raises(TypeError, match="x1 must be an array"):
        portops.vecdot([[1.0]], x)
    with pytest.raises(TypeError, match="x2"):
        portops.vecdot(x, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="x2"):
        portops.vecdot(x, None)
    with pytest.raises(TypeError, match="x1 must have a numeric dtype"):
        portops.vecdot(backend.asarray(np.ones((3, 4), bool)), x)
    with pytest.raises(TypeError, match="x2 must have a numeric dtype"):
        portops.vecdot(x, backend.asarray(np.ones(4, bool)))
    with pytest.raises(ValueError, match="same length along axis -1"):
        portops.vecdot(x, backend.asarray(np.ones(3)))
    with pytest.raises(ValueError, match="do not broadcast"):
        portops.vecdot(x, backend.asarray(np.ones((2, 4))))
    with pytest.raises(ValueError, match="axis=-3 is out of range"):
        portops.vecdot(x, x, axis=-3)
    with pytest.raises(ValueError, match="axis=0 is ambiguous"):
        portops.vecdot(x, backend.asarray(np.ones(4)), axis=0)
    with pytest.raises(TypeError, match="axis must be an integer"):
        portops.vecdot(x, x, axis=1.0)
    with pytest.raises(ValueError, match="at least one dimension"):
        portops.vecdot(backend.asarray(np.ones(())), backend.asarray(np.ones(())))


def test_two_libraries_rejected(backend: Backend) -> None:
    if backend.library == "numpy":
        pytest.skip("needs a second library")
    if backend.library == "dask":
        pytest.skip("Dask takes NumPy operands (tests/test_dask_mixed.py)")
    with pytest.raises(TypeError, match="two array libraries"):
        portops.vecdot(backend.asarray(np.ones(3)), np.ones(3))


# -- dispatch ---------------------------------------------------------------------------


def test_registered_and_explained() -> None:
    names = {i["name"] for i in portops.implementations("vecdot")}
    assert {"generic", "numpy"} <= names
    report = portops.explain("vecdot", np.ones((2, 3)), np.ones(3))
    assert report.chosen == "numpy"


def test_import_loads_no_optional_library() -> None:
    code = (
        "import sys, numpy as np, portops; portops.vecdot(np.ones(3), np.ones(3)); "
        "print(sorted(m for m in ('torch', 'jax', 'dask', 'cupy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dask_stays_lazy() -> None:
    da = pytest.importorskip("dask.array")
    x = da.ones((6, 80), chunks=(3, 40))
    y = portops.vecdot(x, x)
    assert isinstance(y, da.Array)
    np.testing.assert_array_equal(y.compute(), np.full(6, 80.0))


def test_jax_jit_and_grad() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    a, b = jnp.asarray(random((3, 5), seed=1)), jnp.asarray(random((5,), seed=2))
    f = jax.jit(lambda u, v: portops.vecdot(u, v))
    expected = reference(np.asarray(a), np.asarray(b))  # float64; jax computes in float32
    np.testing.assert_allclose(np.asarray(f(a, b)), expected, rtol=1e-5)
    g1, g2 = jax.grad(lambda u, v: portops.vecdot(u, v).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(np.asarray(g1), np.broadcast_to(np.asarray(b), (3, 5)))
    np.testing.assert_allclose(np.asarray(g2), np.asarray(a).sum(0), rtol=1e-5)


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128], ids=str
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_outer_broadcasting(backend: Backend, impl: str, dtype, keepdims: bool) -> None:
    # Every x1 vector meets every x2 vector: the NumPy/torch CPU path uses one GEMM.
    a, b = random((4, 1, 3, 70), dtype, 1), random((5, 1, 70), dtype, 2)
    x1, x2 = make(backend, a), make(backend, b)
    got = run(backend, impl, x1, x2, keepdims=keepdims)
    assert_matches(backend, got, reference(a, b, keepdims=keepdims), dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex64, np.complex128], ids=str)
@pytest.mark.parametrize(
    ("s1", "s2", "axis"),
    [
        ((6, 70), (70,), -1),  # one vector against many: a matrix-vector product
        ((70,), (2, 3, 70), -1),
        ((1, 1, 70), (4, 70), -1),
        ((70, 6), (70, 1), -2),
        ((5, 1), (5, 8), -2),
        ((1, 1), (1, 5), -2),  # a length-1 axis
    ],
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_single_vector_against_many(backend: Backend, impl: str, dtype, s1, s2, axis, keepdims):
    a, b = random(s1, dtype, 1), random(s2, dtype, 2)
    x1, x2 = make(backend, a), make(backend, b)
    got = run(backend, impl, x1, x2, axis=axis, keepdims=keepdims)
    assert_matches(backend, got, reference(a, b, axis=axis, keepdims=keepdims), dtype=dtype)


@pytest.mark.parametrize("rows", [300, 5000])
@pytest.mark.parametrize("length", [1, 2, 3, 40])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_many_vectors(backend: Backend, impl: str, rows: int, length: int, layout: str) -> None:
    # Past vecdot_few vectors: einsum by columns (length 2 float32), einsum, np.vecdot.
    shape = (length, rows) if layout == "transposed" else (rows, length)
    a, b = random(shape, np.float32, 1), random(shape, np.float32, 2)
    if layout == "transposed":
        a, b = a.T, b.T
    got = run(backend, impl, make(backend, a), make(backend, b))
    assert_matches(backend, got, reference(a, b), dtype=np.float32)
