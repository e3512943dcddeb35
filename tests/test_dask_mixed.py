"""In-memory operands beside Dask arrays, and Dask arrays of CuPy chunks, on every op.

NumPy (or CuPy) masks, operands and offsets beside Dask arrays are wrapped as Dask
arrays without computing anything; results are Dask arrays equal to the direct NumPy
(or CuPy) call. In-memory arrays of another library than the Dask chunks are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import pytest
from backends import require

import portops


class Case(NamedTuple):
    """One call: the function, its inputs' shapes, and which inputs are Dask arrays."""

    id: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    lazy: tuple[bool, ...]


def _shift_sum(x: Any, m: Any) -> Any:
    return portops.shift_sum(x, 2, mask=m)


def _offsets(x: Any, m: Any) -> Any:
    return portops.shift_sum(x, np.array([0, 3, 1]), mask=m, keepdims=True)


def _channels_last(x: Any, m: Any) -> Any:
    return portops.shift_sum(x, -1, axis=-2, channel_axis=-1, mask=m)


def _adjoint(y: Any, m: Any) -> Any:
    return portops.shift_sum_adjoint(y, 2, channels=3, mask=m)


def _pinv(y: Any, m: Any) -> Any:
    return portops.shift_sum_pinv(y, 2, channels=3, mask=m)


def _einsum_mask(a: Any, b: Any) -> Any:
    return portops.einsum("bchw,hw->bc", a, b)


def _einsum_gram(a: Any, b: Any) -> Any:
    return portops.einsum("ij,kj->ik", a, b)


def _einsum_three(a: Any, b: Any, c: Any) -> Any:
    return portops.einsum("bind,jnd,n->bnij", a, b, c)


def _vecdot(a: Any, b: Any) -> Any:
    return portops.vecdot(a, b)


def _vecdot_axis(a: Any, b: Any) -> Any:
    return portops.vecdot(a, b, axis=-2, keepdims=True)


X, MASK, Y = (4, 3, 6, 10), (6, 10), (4, 6, 14)
CASES = [
    Case("shift_sum mask in memory", _shift_sum, (X, MASK), (True, False)),
    Case("shift_sum x in memory", _shift_sum, (X, MASK), (False, True)),
    Case("shift_sum offsets array, (C,H,W) mask", _offsets, (X, (3, 6, 10)), (True, False)),
    Case("shift_sum channels-last", _channels_last, ((4, 6, 10, 3), (10, 3)), (True, False)),
    Case("adjoint mask in memory", _adjoint, (Y, MASK), (True, False)),
    Case("adjoint y in memory", _adjoint, (Y, MASK), (False, True)),
    Case("pinv mask in memory", _pinv, (Y, MASK), (True, False)),
    Case("pinv y in memory", _pinv, (Y, MASK), (False, True)),
    Case("einsum second in memory", _einsum_mask, (X, MASK), (True, False)),
    Case("einsum first in memory", _einsum_gram, ((5, 8), (7, 8)), (False, True)),
    Case(
        "einsum two of three in memory",
        _einsum_three,
        ((4, 5, 2, 6), (3, 2, 6), (2,)),
        (True, False, False),
    ),
    Case("vecdot second in memory", _vecdot, ((6, 80), (80,)), (True, False)),
    Case("vecdot first in memory", _vecdot_axis, ((5, 4, 3), (4, 3)), (False, True)),
]


def _inputs(case: Case, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in case.shapes]


def _chunks(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(1, (n + 1) // 2) for n in shape)


@contextmanager
def no_compute() -> Iterator[None]:
    """Fail on any compute of a Dask collection inside the block."""
    import dask

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Dask array was computed")

    with dask.config.set(scheduler=refuse):
        yield


@pytest.fixture
def da() -> Any:
    require("dask")
    import dask.array

    return dask.array


# --------------------------------------------------------------------------- NumPy


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_numpy_beside_dask_stays_lazy_and_matches_numpy(da: Any, case: Case) -> None:
    arrays = _inputs(case)
    args = [
        da.from_array(a, chunks=_chunks(a.shape)) if lazy else a
        for a, lazy in zip(arrays, case.lazy, strict=True)
    ]
    with no_compute():
        got = case.fn(*args)
        assert isinstance(got, da.Array)
    expected = case.fn(*arrays)
    assert isinstance(expected, np.ndarray)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    computed = got.compute()
    assert isinstance(computed, np.ndarray)
    np.testing.assert_allclose(computed, expected, rtol=1e-12, atol=1e-12)


def test_inputs_not_modified(da: Any) -> None:
    x = da.from_array(np.ones(X), chunks=2)
    mask = np.full(MASK, 2.0)
    mask.flags.writeable = False
    y = portops.shift_sum(x, 1, mask=mask).compute()
    np.testing.assert_array_equal(mask, 2.0)
    assert y.sum() == 2.0 * x.size


def test_wrapped_operands_take_the_dask_chunks(da: Any) -> None:
    from portops._arrays import as_dask_operands

    x = da.ones((4, 3, 6, 10), chunks=(2, 3, 3, 5))
    _, mask, _ = as_dask_operands((x, np.ones((1, 6, 10)), None))
    assert mask.chunks == ((1,), (3, 3), (5, 5))
    a = da.ones((8, 6), chunks=(4, 3))
    _, b = as_dask_operands((a, np.ones((5, 6))), [(0, 1), (2, 1)])  # "ij,kj"
    assert b.chunks == ((5,), (3, 3))
    # vecdot: no rechunking of the Dask operand, result chunks follow it.
    v = portops.vecdot(da.ones((6, 80), chunks=(3, 40)), np.ones(80))
    assert v.chunks == ((3, 3),)
    assert not any("rechunk" in name for name in v.dask.layers)


@pytest.mark.parametrize("keepdims", [False, True])
def test_blocks_are_not_copied_before_the_call(da: Any, monkeypatch, keepdims: bool) -> None:
    """Each block goes to the kernel as it is: the only concatenation is the result's."""
    import dask.array.core

    calls = []
    concatenate3 = dask.array.core.concatenate3

    def counted(arrays: Any) -> Any:
        calls.append(1)
        return concatenate3(arrays)

    monkeypatch.setattr(dask.array.core, "concatenate3", counted)
    x = np.random.default_rng(0).random((8, 3, 5, 6))
    y = portops.shift_sum(da.from_array(x, chunks=(2, 3, 5, 6)), 2, keepdims=keepdims)
    np.testing.assert_allclose(
        y.compute(scheduler="sync"), portops.shift_sum(x, 2, keepdims=keepdims)
    )
    assert len(calls) <= 1, f"{len(calls)} concatenations for 4 blocks"


def test_bool_mask_beside_dask(da: Any) -> None:
    x = np.random.default_rng(1).standard_normal(X)
    mask = np.random.default_rng(2).random(MASK) > 0.5
    with no_compute():
        got = portops.shift_sum(da.from_array(x, chunks=2), 2, mask=mask)
    np.testing.assert_allclose(got.compute(), portops.shift_sum(x, 2, mask=mask), rtol=1e-12)


def _chain(x: Any, mask: Any) -> Any:
    """The normal equations' operator A^T A: a result of one op fed to the next."""
    y = portops.shift_sum(x, 2, mask=mask)
    return portops.shift_sum_adjoint(y, 2, channels=3, mask=mask)


def test_results_chain_with_numpy_masks(da: Any) -> None:
    rng = np.random.default_rng(3)
    x, mask = rng.standard_normal(X), rng.random(MASK)
    with no_compute():
        got = _chain(da.from_array(x, chunks=2), mask)
    assert type(got._meta) is np.ndarray and got._meta.ndim == got.ndim
    np.testing.assert_allclose(got.compute(), _chain(x, mask), rtol=1e-12)


# --------------------------------------------------------------------------- mismatches


def test_other_libraries_beside_numpy_chunks_are_refused(da: Any) -> None:
    torch = pytest.importorskip("torch")
    x = da.ones(X, chunks=2)
    with pytest.raises(TypeError, match="x is a Dask array of numpy chunks and mask is a torch"):
        portops.shift_sum(x, 1, mask=torch.ones(MASK, dtype=torch.float64))
    with pytest.raises(TypeError, match="x1 is a Dask array of numpy chunks and x2 is a torch"):
        portops.vecdot(x, torch.ones(10, dtype=torch.float64))
    with pytest.raises(TypeError, match="operand 0 is a Dask array of numpy chunks"):
        portops.einsum("ij,jk", da.ones((2, 2)), torch.ones(2, 2))
    # Without a Dask array, two libraries stay two libraries.
    with pytest.raises(TypeError, match="two array libraries"):
        portops.shift_sum(np.ones(X), 1, mask=torch.ones(MASK))


def test_numpy_beside_other_chunks_is_refused(da: Any) -> None:
    torch = pytest.importorskip("torch")
    x = da.ones(X, chunks=2)
    meta = torch.empty((0, 0, 0, 0), dtype=torch.float64)
    x_torch = x.map_blocks(torch.as_tensor, meta=meta)
    with pytest.raises(TypeError, match="x is a Dask array of torch chunks and mask is a numpy"):
        portops.shift_sum(x_torch, 1, mask=np.ones(MASK))
    with pytest.raises(TypeError, match="Dask arrays of numpy and torch chunks"):
        portops.vecdot(x, x_torch)


# --------------------------------------------------------------------------- CuPy


@pytest.fixture
def cupy(da: Any) -> Any:
    require("cupy")
    import cupy

    return cupy


def _dask_of_cupy(da: Any, cupy: Any, a: np.ndarray) -> Any:
    return da.from_array(cupy.asarray(a), chunks=_chunks(a.shape), asarray=False)


@pytest.mark.parametrize("all_lazy", [False, True], ids=["cupy beside dask", "all dask"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_dask_of_cupy_matches_cupy(da: Any, cupy: Any, case: Case, all_lazy: bool) -> None:
    arrays = [cupy.asarray(a) for a in _inputs(case)]
    args = [
        da.from_array(a, chunks=_chunks(a.shape), asarray=False) if lazy or all_lazy else a
        for a, lazy in zip(arrays, case.lazy, strict=True)
    ]
    with no_compute():
        got = case.fn(*args)
        assert isinstance(got, da.Array)
        assert isinstance(got._meta, cupy.ndarray), type(got._meta)
    expected = case.fn(*arrays)
    assert isinstance(expected, cupy.ndarray)
    computed = got.compute()
    assert isinstance(computed, cupy.ndarray), type(computed)
    assert computed.shape == expected.shape and computed.dtype == expected.dtype
    np.testing.assert_allclose(computed.get(), expected.get(), rtol=1e-12, atol=1e-12)


def test_dask_of_cupy_results_chain_with_cupy_masks(da: Any, cupy: Any) -> None:
    # A result whose blocks are CuPy says so (its _meta), so a CuPy mask can follow it.
    rng = np.random.default_rng(3)
    x, mask = cupy.asarray(rng.standard_normal(X)), cupy.asarray(rng.random(MASK))
    with no_compute():
        got = _chain(da.from_array(x, chunks=2, asarray=False), mask)
        assert isinstance(got._meta, cupy.ndarray)
    computed = got.compute()
    assert isinstance(computed, cupy.ndarray)
    np.testing.assert_allclose(computed.get(), _chain(x, mask).get(), rtol=1e-12)


def test_cupy_and_numpy_chunks_do_not_mix(da: Any, cupy: Any) -> None:
    x_np = np.ones(X)
    with pytest.raises(TypeError, match="x is a Dask array of numpy chunks and mask is a cupy"):
        portops.shift_sum(da.from_array(x_np, chunks=2), 1, mask=cupy.ones(MASK))
    x_cp = _dask_of_cupy(da, cupy, x_np)
    with pytest.raises(TypeError, match="x is a Dask array of cupy chunks and mask is a numpy"):
        portops.shift_sum(x_cp, 1, mask=np.ones(MASK))
    with pytest.raises(TypeError, match="Dask arrays of cupy and numpy chunks"):
        portops.vecdot(x_cp, da.from_array(x_np, chunks=2))
