"""Strategy choices on other machines: the rules read the machine profile, so the choice
portops makes on a laptop, a GPU host's CPU or a 64-core server can be checked here.
On every profile each call's choice is one of its implementation's strategies, its
thread count within the profile's cores, its result right, and the invariants hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import portops
from portops import _threads

MiB = 1 << 20
PROFILES: dict[str, dict[str, Any]] = {
    "one core": dict(cores=1, l1=32 << 10, l2=1 * MiB, l3=8 * MiB, memory=8 << 30),
    "2-core VM": dict(cores=2, l1=48 << 10, l2=2 * MiB, l3=300 * MiB, l3_shared_by=2),
    "16-core GPU host": dict(
        cores=16, l1=32 << 10, l2=1 * MiB, l3=32 * MiB, l3_shared_by=8, memory=128 << 30
    ),
    "64-core Xeon": dict(cores=64, l1=48 << 10, l2=2 * MiB, l3=105 * MiB, memory=512 << 30),
    "Mac without sysfs": dict(cores=8, l1=128 << 10, l2=16 * MiB, l3=0, line=128),
}
# The seed's headline case: a CASSI cube, batch 16, 28 channels, 256x256, float32.
SEED = (16, 28, 256, 256)


def _cases(xp: Any) -> dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """(operation, arguments, keywords) of every operation at cache and larger sizes."""
    rng = np.random.default_rng(0)

    def arr(*shape: int) -> Any:
        return xp.asarray(rng.standard_normal(shape).astype(np.float32))

    cube = arr(2, 8, 128, 256)
    return {
        "forward small": ("shift_sum", (arr(2, 4, 16, 20), 2), {}),
        "forward large": ("shift_sum", (cube, 2), {}),
        "masked forward": ("shift_sum", (cube, 1), {"mask": arr(128, 256)}),
        "adjoint": ("shift_sum_adjoint", (arr(2, 128, 270), 2), {"channels": 8}),
        "pinv": ("shift_sum_pinv", (arr(2, 64, 78), 2), {"channels": 8}),
        "shear": ("shear", (cube, 2), {}),
        "vecdot": ("vecdot", (arr(4096, 64), arr(4096, 64)), {}),
        "vecdot one vector": ("vecdot", (arr(4096, 64), arr(64)), {}),
        "einsum": ("einsum", ("bij,bjk->bik", arr(8, 64, 32), arr(8, 32, 16)), {}),
    }


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_choices_on_each_profile(profile: str, library: str) -> None:
    xp = pytest.importorskip(library)
    cases = _cases(xp)
    expected = {k: np.asarray(getattr(portops, op)(*a, **kw)) for k, (op, a, kw) in cases.items()}
    with portops.machine(**PROFILES[profile]):
        cores = portops.machine().cores
        for name, (op, args, kwargs) in cases.items():
            report = portops.explain(op, *args, **kwargs)
            assert report.strategy in [s.name for s in report.strategies], (name, report)
            assert report.reason, (name, report)
            if library == "numpy":  # torch's own calls run on torch's threads
                assert 1 <= report.threads <= cores, (name, report.threads)
            result = np.asarray(getattr(portops, op)(*args, **kwargs))
            np.testing.assert_allclose(result, expected[name], rtol=2e-5, atol=2e-4)


def test_the_seed_case_uses_the_cores_of_a_large_machine() -> None:
    x = np.zeros(SEED, np.float32)  # not written: explain only reads its geometry
    with portops.machine(**PROFILES["64-core Xeon"]):
        report = portops.explain("shift_sum", x, 2)
    assert report.threads >= 16, report
    with portops.machine(**PROFILES["one core"]):
        assert portops.explain("shift_sum", x, 2).threads == 1


def test_a_one_thread_worker_starts_no_thread() -> None:
    """A Dask worker with one thread (``portops.threads(1)``, or a one-core profile) runs
    every kernel on its own thread."""
    x = np.random.default_rng(0).standard_normal((4, 16, 256, 512))
    before = _threads.helpers_started()
    with portops.threads(1):
        assert portops.explain("shift_sum", x, 2).threads == 1
        portops.shift_sum(x, 2)
        portops.shift_sum_adjoint(portops.shift_sum(x, 2), 2, channels=16)
        portops.shear(x, 2)
    with portops.machine(cores=1):
        portops.shift_sum(x, 2)
    assert _threads.helpers_started() == before


@pytest.mark.parametrize(("omp", "expected"), [("1", 1), ("4,2", 4), ("many", 16), ("", 16)])
def test_omp_num_threads_limits_threads_when_threadpoolctl_cannot(
    monkeypatch: pytest.MonkeyPatch, omp: str, expected: int
) -> None:
    """Dask's workers set ``OMP_NUM_THREADS=1``; without threadpoolctl to read the BLAS
    limit it is portops' limit (as read at import), and a malformed or empty value is no
    limit."""
    monkeypatch.setattr(_threads, "_blas_lookup_done", True)
    monkeypatch.setattr(_threads, "_blas_get", None)
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setattr(_threads, "_openmp_at_import", _threads._openmp_limit())
    x = np.zeros(SEED, np.float32)  # not written: explain only reads its geometry
    with portops.machine(**PROFILES["16-core GPU host"]):
        assert portops.explain("shift_sum", x, 2).threads == expected
        if expected == 1:
            before = _threads.helpers_started()
            portops.shift_sum(np.ones((4, 16, 256, 512)), 2)
            assert _threads.helpers_started() == before


def test_a_cluster_started_later_leaves_the_limit_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """dask.distributed sets ``OMP_NUM_THREADS=1`` in the client's own environment when
    it starts workers: the client's limit is the one read at import."""
    monkeypatch.setattr(_threads, "_blas_lookup_done", True)
    monkeypatch.setattr(_threads, "_blas_get", None)
    monkeypatch.setattr(_threads, "_openmp_at_import", None)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with portops.machine(**PROFILES["16-core GPU host"]):
        assert _threads.effective_threads() == 16


@pytest.mark.parametrize("profile", list(PROFILES))
def test_a_call_needing_autograd_takes_a_strategy_that_keeps_it(profile: str) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8, 128, 256, requires_grad=True)
    a, b = torch.randn(4096, 64, requires_grad=True), torch.randn(4096, 64)
    with portops.machine(**PROFILES[profile]):
        for report in (
            portops.explain("shift_sum", x, 2),
            portops.explain("shift_sum_adjoint", x[:, 0], 2, channels=8),
            portops.explain("shear", x, 2),
            portops.explain("vecdot", a, b),
            portops.explain("einsum", "ij,ij->i", a, b),
        ):
            chosen = next(s for s in report.strategies if s.chosen)
            assert "grad" in report.needs, report
            assert set(report.needs) <= set(chosen.features), report
