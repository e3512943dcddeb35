"""The torch CPU plan that gives long contiguous vectors one BLAS dot each
(portops._backends.torch.row_dots): when it is chosen, and that it gives the reference
result for every layout it accepts, leaving its inputs untouched."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portops
from portops._ops import vecdot as vecdot_module

torch = pytest.importorskip("torch")
row_dots = pytest.importorskip("portops._backends.torch.row_dots")
torch_vecdot = pytest.importorskip("portops._backends.torch.vecdot")


@pytest.fixture(autouse=True)
def fresh_plans():
    vecdot_module.PLANS.clear()
    yield
    vecdot_module.PLANS.clear()


def _plan(x1, x2, keepdims=False):
    portops.vecdot(x1, x2, keepdims=keepdims)
    (plan,) = vecdot_module.PLANS._plans.values()
    vecdot_module.PLANS.clear()
    return plan


def _is_row_dots(plan) -> bool:
    return getattr(plan, "__qualname__", "").startswith("row_dots_plan.")


def _reference(x1, x2, keepdims=False):
    return torch.sum(x1.double() * x2.double(), dim=-1, keepdim=keepdims)


def test_the_operator_exists() -> None:
    """The private operator the plan rests on is in the installed torch (where a
    future torch drops it, the plan is never chosen, and this test says so)."""
    assert row_dots._ROW_DOTS is not None


@pytest.mark.parametrize(
    ("shape", "chosen"),
    [
        ((500, 500), True),  # 2 MB in all, 2 KiB vectors
        ((4, 128, 512), True),  # leading dimensions merge into rows
        ((1024, 128), False),  # 512-byte vectors: one BLAS call each costs too much
        ((64, 8192), False),  # one task of GRAIN rows: one thread
        ((128, 256), False),  # 256 KiB in all: within one core's L2
    ],
)
def test_which_shapes(monkeypatch, shape, chosen) -> None:
    monkeypatch.setattr(row_dots, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    x = torch.ones(shape)
    assert _is_row_dots(_plan(x, x)) is chosen


def test_not_chosen_for_layouts_or_settings_it_cannot_serve(monkeypatch) -> None:
    monkeypatch.setattr(row_dots, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    x = torch.ones(500, 500)
    assert not _is_row_dots(_plan(x.T, x.T))  # strided vectors
    assert not _is_row_dots(_plan(x, x[0]))  # broadcast: a matrix-vector product
    assert not _is_row_dots(_plan(x.half(), x.half()))  # no BLAS dot
    unmergeable = torch.ones(128, 4, 512).transpose(0, 1)  # (4, 128, 512), rows apart
    assert not _is_row_dots(_plan(unmergeable, unmergeable))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert not _is_row_dots(_plan(x, x))  # one thread: NumPy's loop reads as fast
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(row_dots, "_ROW_DOTS", None)  # a torch without the operator
    assert not _is_row_dots(_plan(x, x))


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    n=st.integers(1, 40),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    keepdims=st.booleans(),
    double=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_dots_plan_matches_the_reference(lead, n, pads, keepdims, double, seed) -> None:
    """With the thresholds lowered (and two threads reported), every shape reaches the
    plan: its result on the first call (which plans) and the second (which reuses the
    plan) matches a float64 reference; rows padded apart in memory (slices of wider
    rows, each input its own width) too."""
    saved = row_dots.ROW_BYTES, row_dots.MIN_BYTES, row_dots.GRAIN, torch_vecdot.NATIVE_SMALL
    row_dots.ROW_BYTES, row_dots.MIN_BYTES, row_dots.GRAIN, torch_vecdot.NATIVE_SMALL = 1, 0, 0, 0
    threads, torch.get_num_threads = torch.get_num_threads, lambda: 2
    try:
        gen = torch.Generator().manual_seed(seed)
        dtype = torch.float64 if double else torch.float32
        for _ in range(2):  # the first call plans, the second reuses the plan
            wide = [torch.randn(*lead, n + p, generator=gen, dtype=dtype) for p in pads]
            x1, x2 = (w[..., :n] for w in wide)
            before = [w.clone() for w in wide]
            got = portops.vecdot(x1, x2, keepdims=keepdims)
            (plan,) = vecdot_module.PLANS._plans.values()
            assert _is_row_dots(plan), plan
            want = _reference(x1, x2, keepdims)
            assert got.dtype == dtype and got.shape == want.shape
            tol = 1e-10 if double else 1e-4
            np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=tol, atol=tol * n)
            for w, b in zip(wide, before, strict=True):
                assert torch.equal(w, b)
    finally:
        row_dots.ROW_BYTES, row_dots.MIN_BYTES, row_dots.GRAIN, torch_vecdot.NATIVE_SMALL = saved
        torch.get_num_threads = threads
        vecdot_module.PLANS.clear()
