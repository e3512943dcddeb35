"""shear / unshear and the Dispersion object against the peers' loops (``--full``).

Size: B=16, C=28, H=W=256, step=2, float32 (``PORTOPS_BENCH_QUICK=1``: a tiny size).
The sheared cube is (B, C, H, W + (C-1)*step). Baselines are the published loops: MST's
``shift`` (a zeroed cube, one slice assignment per channel), its 4-D ``shift_back`` (one
window per channel) and DAUHST's ``y_shift`` (``shift(shift_back(y))``), in NumPy and in
torch. Each comparison also copies the bytes the operation must move (the limit).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import portops
from benchmarks.copies import copy_candidate
from benchmarks.interleave import Candidate

pytestmark = pytest.mark.full

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
B, C, H, W, S = (2, 4, 32, 32, 2) if QUICK else (16, 28, 256, 256, 2)
WO = W + (C - 1) * S
CASE = f"B{B} C{C} {H}x{W} step{S} float32"
X_BYTES = B * C * H * W * 4
CUBE_BYTES = B * C * H * WO * 4
Y_BYTES = B * H * WO * 4


@pytest.fixture(scope="module", autouse=True)
def _room_for_results() -> Iterator[None]:
    """The result-buffer cache holds a cube or two more: else every result would be a
    fresh, page-faulting allocation."""
    limit = portops.set_cache_limit(portops.cache_info().max_bytes + 2 * (X_BYTES + CUBE_BYTES))
    yield
    portops.set_cache_limit(limit)


@functools.cache
def _data(backend: str) -> dict[str, Any]:
    rng = np.random.default_rng(2023)
    x = rng.random((B, C, H, W), dtype=np.float32)
    mask = rng.random((H, W), dtype=np.float32)
    d = {"x": x, "mask": mask, "cube": portops.shear(x, S), "y": portops.shift_sum(x, S)}
    if backend == "torch":
        torch = pytest.importorskip("torch")
        d = {k: torch.from_numpy(v) for k, v in d.items()}
    return d


def _lib(backend: str) -> Any:
    return np if backend == "numpy" else pytest.importorskip("torch")


def mst_shift(xp: Any, x: Any) -> Any:
    """MST's simulation ``shift``: a zeroed cube, one slice assignment per channel."""
    out = xp.zeros((B, C, H, WO), dtype=x.dtype)
    for i in range(C):
        out[:, i, :, S * i : S * i + W] = x[:, i, :, :]
    return out


def mst_shift_back(cube: Any) -> Any:
    """MST / MST++ / BiSRNet 4-D ``shift_back`` (on a copy: the original is in place)."""
    cube = cube.copy() if isinstance(cube, np.ndarray) else cube.clone()
    for i in range(C):
        cube[:, i, :, :W] = cube[:, i, :, S * i : S * i + W]
    return cube[:, :, :, :W]


def dauhst_y_shift(xp: Any, y: Any) -> Any:
    """DAUHST's ``y_shift``: each channel's window of the measurement."""
    out = xp.zeros((B, C, H, WO), dtype=y.dtype)
    for i in range(C):
        out[:, i, :, S * i : S * i + W] = y[:, :, S * i : S * i + W]
    return out


def _compare(compare: Any, backend: str, op: str, label: str, nbytes: int, **fns: Any) -> None:
    """portops (``fns["portops"]``) against the other named calls and a copy."""
    candidates = [Candidate("portops", "default", fns.pop("portops"))]
    candidates += [Candidate(name.replace("_", " "), "baseline", fn) for name, fn in fns.items()]
    candidates.append(copy_candidate(nbytes // 2))
    compare(candidates, op=op, case=CASE, backend=backend, label=label, nbytes=nbytes)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_shear(compare: Any, backend: str) -> None:
    xp, x = _lib(backend), _data(backend)["x"]
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shear(x, S),
        "MST_shift_loop": lambda: mst_shift(xp, x),
    }
    _compare(compare, backend, "shear", "forward", X_BYTES + CUBE_BYTES, **fns)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_unshear(compare: Any, backend: str) -> None:
    cube = _data(backend)["cube"]
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.unshear(cube, S),
        "MST_shift_back_loop": lambda: mst_shift_back(cube),
    }
    _compare(compare, backend, "unshear", "adjoint", X_BYTES + CUBE_BYTES, **fns)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_y_shift(compare: Any, backend: str) -> None:
    xp, y = _lib(backend), _data(backend)["y"]
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shear(portops.shift_sum_adjoint(y, S, channels=C), S),
        "DAUHST_y_shift_loop": lambda: dauhst_y_shift(xp, y),
    }
    _compare(compare, backend, "shear", "y_shift", Y_BYTES + CUBE_BYTES, **fns)


def test_torch_shear_forward_backward(compare: Any) -> None:
    """shear + backward (unshear) through autograd, gradients for x."""
    torch = pytest.importorskip("torch")
    x = _data("torch")["x"].clone().requires_grad_()
    grad = torch.ones(B, C, H, WO)

    def step(forward: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            forward().backward(grad)

        return run

    fns = {
        "portops": step(lambda: portops.shear(x, S)),
        "MST_shift_loop": step(lambda: mst_shift(torch, x)),
    }
    _compare(compare, "torch", "shear", "forward+backward", 2 * (X_BYTES + CUBE_BYTES), **fns)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_dispersion_pinv(compare: Any, backend: str) -> None:
    """Dispersion.pinv with its kept Phi against the calls it is built on."""
    d = _data(backend)
    y, mask = d["y"], d["mask"]
    A = portops.Dispersion(S, C, mask=mask)
    A.pinv(y)  # Phi computed once, as an iterative solver's first call would
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: A.pinv(y),
        "portops_adjoint": lambda: A.adjoint(y),
        "portops_functional_pinv": lambda: portops.shift_sum_pinv(y, S, channels=C, mask=mask),
    }
    _compare(compare, backend, "shift_sum_pinv", "Dispersion.pinv", X_BYTES + Y_BYTES, **fns)
