"""Per-signature call plans: a repeated call reuses its plan and stays correct, plans
are bounded and keep no array alive, and anything unusual takes the full path."""

from __future__ import annotations

import gc
import importlib
import weakref

import numpy as np
import pytest
import shift_sum_reference as ref
from backends import pythonpath

import portops
from portops import _dispatch, _plans
from portops._plans import PlanCache

shift_sum_module = importlib.import_module("portops._ops.shift_sum")


def _count_full_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = _dispatch.invoke_planned

    def counting(op, *args, **kwargs):
        calls.append(op)
        return real(op, *args, **kwargs)

    monkeypatch.setattr(_dispatch, "invoke_planned", counting)
    return calls


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (1, 4, 64, 4200)], ids=["small", "blocked"])
@pytest.mark.parametrize("masked", [False, True])
def test_repeated_calls_reuse_the_plan_with_new_values(monkeypatch, shape, masked):
    calls = _count_full_calls(monkeypatch)
    for c in (shift_sum_module.FORWARD_PLANS, shift_sum_module.ADJOINT_PLANS):
        c.clear()
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(shape)
        mask = rng.random(shape[-2:]) if masked else None
        np.testing.assert_allclose(
            portops.shift_sum(x, 2, mask=mask), ref.forward(x, 2, mask=mask), rtol=1e-12
        )
        y = rng.standard_normal((shape[0], shape[2], shape[3] + 6))
        np.testing.assert_allclose(
            portops.shift_sum_adjoint(y, 2, channels=4, mask=mask),
            ref.adjoint(y, 2, channels=4, mask=mask),
            rtol=1e-12,
        )
    assert calls == ["shift_sum", "shift_sum_adjoint"]  # planned once each


def test_plans_keep_no_array_alive():
    x = np.ones((1, 4, 64, 4200))  # past the small-array path: the blocked kernels' plans
    y = portops.shift_sum(x, 2)
    mask = np.ones((64, 4200))
    refs = [weakref.ref(a) for a in (x, y, mask)]
    portops.shift_sum(x, 2, mask=mask)
    portops.shift_sum_adjoint(y, 2, channels=4, mask=mask)
    portops.shift_sum_pinv(y, 2, channels=4, mask=mask)
    del x, y, mask
    gc.collect()
    assert all(r() is None for r in refs)


def test_plans_keep_no_tensor_alive():
    torch = pytest.importorskip("torch")
    y = torch.ones(2, 6, 13, dtype=torch.float64)
    mask = torch.rand(6, 9, dtype=torch.float64)
    refs = [weakref.ref(t) for t in (y, mask)]
    portops.shift_sum_pinv(y, 1, channels=5, mask=mask)
    portops.shift_sum_adjoint(y, 1, channels=5, mask=mask)
    del y, mask
    gc.collect()
    assert all(r() is None for r in refs)


def test_the_cache_is_bounded():
    cache = PlanCache("test cache", maxsize=2)
    for k in range(5):
        cache.put(k, lambda *a: None)
    assert len(cache) == 2 and cache.get(4) is not None and cache.get(0) is None
    PlanCache("test cache, off", maxsize=0).put(1, lambda *a: None)  # plans off: nothing kept
    stats = portops.plan_stats()["test cache"]
    assert (stats.held, stats.made, stats.maxsize) == (2, 5, 2)


def test_unusual_arguments_take_the_full_path():
    x = np.ones((2, 3, 4))
    params = shift_sum_module._params
    assert params(1, None, -1, -3, False) is not None
    assert params(True, None, -1, -3, False) is None  # bool step: validation rejects
    assert params(1, None, True, -3, False) is None
    assert params([0, 1, True], None, -1, -3, False) is None
    assert params(1, None, -1, -3, np.bool_(False)) is None
    assert _plans.key((), x.view(np.ma.MaskedArray)) is None  # a subclass: no plan
    assert _plans.key((), x, np.ones(3)) is not None
    with pytest.raises(TypeError, match="axis"):
        portops.shift_sum(x, 1, axis=True)


def test_keys_declare_the_state_they_depend_on():
    """The machine profile and the tuned parameters are part of every key: a plan made
    for one profile is not run under another."""
    from portops import _tuning

    x = np.ones((2, 3, 4))
    key = _plans.key((1,), x)
    assert _plans.key((1,), x) == key
    with portops.machine(cores=64):
        assert _plans.key((1,), x) != key
    with _tuning.overridden({"numpy.vecdot_short": 7}):
        assert _plans.key((1,), x) != key
    # (Tuned values changing drops every plan: the keys made from then on differ too.)
    assert _plans.key((1,), x) == _plans.key((1,), x)


def test_a_preference_bypasses_the_plans(monkeypatch):
    x = np.arange(24.0).reshape(2, 3, 4)
    portops.shift_sum(x, 1)  # planned with the default
    calls = _count_full_calls(monkeypatch)
    with portops.prefer(shift_sum="numpy_add_at"):
        np.testing.assert_allclose(portops.shift_sum(x, 1), ref.forward(x, 1))
    assert calls == ["shift_sum"]


def test_a_malformed_setting_warns_and_keeps_the_default():
    import subprocess
    import sys

    code = "import portops._plans as p; print(p.plan_cache_size())"
    env = {"PORTOPS_PLAN_CACHE": "many", "PYTHONPATH": pythonpath(".")}
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "512" and "PORTOPS_PLAN_CACHE" in out.stderr
