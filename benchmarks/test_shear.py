"""shear / unshear and the Dispersion object: portops against the peers' loops and a copy.

Size: B=16, C=28, H=W=256, step=2, float32 (``PORTOPS_BENCH_QUICK=1``: a tiny size).
The sheared cube is (B, C, H, W + (C-1)*step). Each group holds two ``copy`` entries,
copies of x + y bytes (the bytes shear must read and write) with ``np.copyto`` and
``Tensor.copy_``; every other entry also times both copies just before each of its
rounds and records the median of the faster as ``paired_copy``. A copy of N bytes reads
N and writes N, so the *limit* of an entry is ``bytes / (copy_bytes / paired_copy)``
(``bytes``: what it must read and write; ``copy_bytes``: what the copies beside it read
and write), half the paired copy's time where the two are equal.

Baselines are the published loops: MST's ``shift`` (a zeroed cube, one slice
assignment per channel), its 4-D ``shift_back`` (one window per channel) and DAUHST's
``y_shift`` (``shift(shift_back(y))``), in NumPy and in torch.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import portops

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
B, C, H, W, S = (2, 4, 32, 32, 2) if QUICK else (16, 28, 256, 256, 2)
WO = W + (C - 1) * S
ROUNDS = 2 if QUICK else 15
CASE = f"B{B} C{C} {H}x{W} step{S} float32"
X_BYTES = B * C * H * W * 4
CUBE_BYTES = B * C * H * WO * 4
Y_BYTES = B * H * WO * 4
ROOFLINES = ["copy np.copyto", "copy Tensor.copy_"]


def _timed_copy(
    roofs: dict[str, Callable[[], Any]], times: list[float], fn: Callable[[], Any]
) -> Callable[[], None]:
    """A setup that times every roofline copy before a round and keeps the fastest,
    then calls `fn` once, untimed, so that each round starts as back-to-back ones do."""
    ordered = sorted(roofs, key=lambda name: name != "copy Tensor.copy_")

    def setup() -> None:
        best = math.inf
        for name in ordered:
            t0 = time.perf_counter()
            roofs[name]()
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        fn()

    return setup


def _run(
    bench: Any,
    fn: Callable[[], Any],
    *,
    kind: str,
    op: str,
    backend: str,
    name: str,
    group: str,
    nbytes: int,
    roofs: dict[str, Callable[[], Any]],
    copy_bytes: int = X_BYTES + CUBE_BYTES,
    rounds: int = ROUNDS,
) -> None:
    # bytes: what the entry must read + write; copy_bytes: what each copy beside it copies.
    info = {"op": op, "case": f"{group} {CASE}", "backend": backend, "device": "cpu"}
    info |= {"kind": kind, "name": name, "bytes": nbytes, "copy_bytes": 2 * copy_bytes}
    if kind == "copy":
        bench(fn, rounds=rounds, **info)
        return
    copies: list[float] = []
    b = bench(fn, rounds=rounds, setup=_timed_copy(roofs, copies, fn), **info)
    if copies:
        b.extra_info["paired_copy"] = statistics.median(copies[-rounds:])


def _as_copy(common: dict[str, Any]) -> dict[str, Any]:
    """A copy entry's arguments: it reads and writes the bytes it copies."""
    return {**common, "nbytes": 2 * common.get("copy_bytes", X_BYTES + CUBE_BYTES)}


def _copies(nbytes: int) -> dict[str, Callable[[], Any]]:
    """Copies of `nbytes` (huge-page NumPy memory) with np.copyto and Tensor.copy_."""
    from portops import _buffers

    src = _buffers.empty((nbytes // 4,), np.float32)
    src[...] = np.random.default_rng(0).random(src.size, dtype=np.float32)
    dst = _buffers.empty((nbytes // 4,), np.float32)
    copies: dict[str, Callable[[], Any]] = {"copy np.copyto": lambda: np.copyto(dst, src)}
    try:
        import torch
    except ImportError:
        return copies
    ts, td = torch.from_numpy(src), torch.from_numpy(dst)
    copies["copy Tensor.copy_"] = lambda: td.copy_(ts)
    return copies


@pytest.fixture(scope="module")
def np_data() -> Iterator[dict[str, Any]]:
    from portops import _buffers

    # The roofline copies and the inputs below hold about 0.9 GB of the result-buffer
    # cache; without more room, every result would be a fresh (page-faulting) one.
    limit = _buffers.set_cache_limit(_buffers.cache_info().max_bytes + 2 * (X_BYTES + CUBE_BYTES))
    rng = np.random.default_rng(2023)
    x = rng.random((B, C, H, W), dtype=np.float32)
    mask = rng.random((H, W), dtype=np.float32)
    yield {
        "x": x,
        "mask": mask,
        "cube": portops.shear(x, S),
        "y": portops.shift_sum(x, S),
        "roofs": _copies(X_BYTES + CUBE_BYTES),
        "small_roofs": _copies(X_BYTES + Y_BYTES),
    }
    _buffers.set_cache_limit(limit)


# ------------------------------------------------------------------ the peers' loops


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
    """DAUHST's ``y_shift``: each channel's window of the measurement, in place."""
    out = xp.zeros((B, C, H, WO), dtype=y.dtype)
    for i in range(C):
        out[:, i, :, S * i : S * i + W] = y[:, :, S * i : S * i + W]
    return out


def _pinv_entries(lib: Any, y: Any, mask: Any) -> dict[str, Callable[[], Any]]:
    A = portops.Dispersion(S, C, mask=mask)
    A.pinv(y)  # Phi computed once, as an iterative solver's first call would
    return {
        "portops": lambda: A.pinv(y),
        "portops adjoint": lambda: A.adjoint(y),
        "portops functional pinv": lambda: portops.shift_sum_pinv(y, S, channels=C, mask=mask),
    }


# ------------------------------------------------------------------ NumPy


def _shear_case(bench: Any, lib: Any, backend: str, data: dict[str, Any], name: str) -> None:
    """One entry of the shear group of `backend` (NumPy or torch: the same cases)."""
    x, mask = data["x"], data["mask"]
    common = {"op": "shear", "backend": backend, "group": "forward", "name": name}
    common |= {"nbytes": X_BYTES + CUBE_BYTES, "roofs": data["roofs"]}
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shear(x, S),
        "portops mask2d": lambda: portops.shear(x, S, mask=mask),
        "portops step0.5": lambda: portops.shear(x, S / 4),
        "MST shift loop": lambda: mst_shift(lib, x),
    }
    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    elif name.startswith("portops "):  # another case, in a group of its own
        _run(bench, fns[name], kind="default", **common | {"group": "forward " + name[8:]})
    else:
        _run(bench, fns[name], kind="baseline" if "MST" in name else "default", **common)


def _unshear_case(bench: Any, backend: str, data: dict[str, Any], name: str) -> None:
    """One entry of the unshear group of `backend`."""
    cube = data["cube"]
    common = {"op": "unshear", "backend": backend, "group": "adjoint", "name": name}
    common |= {"nbytes": X_BYTES + CUBE_BYTES, "roofs": data["roofs"]}
    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    elif name == "portops":
        _run(bench, lambda: portops.unshear(cube, S), kind="default", **common)
    else:
        _run(bench, lambda: mst_shift_back(cube), kind="baseline", **common)


@pytest.mark.parametrize(
    "name", ["portops", "portops mask2d", "portops step0.5", *ROOFLINES, "MST shift loop"]
)
def test_numpy_shear(bench, np_data, name):
    _shear_case(bench, np, "numpy", np_data, name)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "MST shift_back loop"])
def test_numpy_unshear(bench, np_data, name):
    _unshear_case(bench, "numpy", np_data, name)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "DAUHST y_shift loop"])
def test_numpy_y_shift(bench, np_data, name):
    y = np_data["y"]
    common = {"op": "shear", "backend": "numpy", "group": "y_shift", "name": name}
    common |= {"nbytes": Y_BYTES + CUBE_BYTES, "roofs": np_data["roofs"]}

    def portops_y_shift() -> Any:
        return portops.shear(portops.shift_sum_adjoint(y, S, channels=C), S)

    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    elif name == "portops":
        _run(bench, portops_y_shift, kind="default", **common)
    else:
        _run(bench, lambda: dauhst_y_shift(np, y), kind="baseline", **common)


@pytest.mark.parametrize(
    "name", ["portops", "portops adjoint", "portops functional pinv", *ROOFLINES]
)
def test_numpy_dispersion_pinv(bench, np_data, name):
    """Dispersion.pinv with its kept Phi against the masked adjoint it is built on."""
    y, mask = np_data["y"], np_data["mask"]
    common = {"op": "dispersion_pinv", "backend": "numpy", "group": "mask2d", "name": name}
    common |= {"nbytes": X_BYTES + Y_BYTES, "roofs": np_data["small_roofs"]}
    common["copy_bytes"] = X_BYTES + Y_BYTES
    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    else:
        kind = "default" if name == "portops" else "baseline"
        _run(bench, _pinv_entries(np, y, mask)[name], kind=kind, **common)


# ------------------------------------------------------------------ torch CPU


@pytest.fixture(scope="module")
def torch_data(np_data: dict[str, Any]) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    return {
        "torch": torch,
        "x": torch.from_numpy(np_data["x"]),
        "mask": torch.from_numpy(np_data["mask"]),
        "cube": torch.from_numpy(np_data["cube"]),
        "y": torch.from_numpy(np_data["y"]),
        "roofs": np_data["roofs"],
        "small_roofs": np_data["small_roofs"],
    }


@pytest.mark.parametrize(
    "name", ["portops", "portops mask2d", "portops step0.5", *ROOFLINES, "MST shift loop"]
)
def test_torch_shear(bench, torch_data, name):
    _shear_case(bench, torch_data["torch"], "torch", torch_data, name)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "MST shift_back loop"])
def test_torch_unshear(bench, torch_data, name):
    _unshear_case(bench, "torch", torch_data, name)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "DAUHST y_shift loop"])
def test_torch_y_shift(bench, torch_data, name):
    torch, y = torch_data["torch"], torch_data["y"]
    common = {"op": "shear", "backend": "torch", "group": "y_shift", "name": name}
    common |= {"nbytes": Y_BYTES + CUBE_BYTES, "roofs": torch_data["roofs"]}

    def portops_y_shift() -> Any:
        return portops.shear(portops.shift_sum_adjoint(y, S, channels=C), S)

    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    elif name == "portops":
        _run(bench, portops_y_shift, kind="default", **common)
    else:
        _run(bench, lambda: dauhst_y_shift(torch, y), kind="baseline", **common)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "MST shift loop"])
def test_torch_shear_forward_backward(bench, torch_data, name):
    """shear + backward (unshear) through autograd, gradients for x."""
    t = torch_data
    torch = t["torch"]
    x = t["x"].clone().requires_grad_()
    grad = torch.ones(B, C, H, WO)
    common = {"op": "shear", "backend": "torch", "group": "forward+backward", "name": name}
    common |= {"nbytes": 2 * (X_BYTES + CUBE_BYTES), "roofs": t["roofs"]}

    def step(forward: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            forward().backward(grad)

        return run

    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    elif name == "portops":
        _run(bench, step(lambda: portops.shear(x, S)), kind="default", **common)
    else:
        _run(bench, step(lambda: mst_shift(torch, x)), kind="baseline", **common)


@pytest.mark.parametrize(
    "name", ["portops", "portops adjoint", "portops functional pinv", *ROOFLINES]
)
def test_torch_dispersion_pinv(bench, torch_data, name):
    """Dispersion.pinv with its kept Phi against the masked adjoint it is built on."""
    y, mask = torch_data["y"], torch_data["mask"]
    common = {"op": "dispersion_pinv", "backend": "torch", "group": "mask2d", "name": name}
    common |= {"nbytes": X_BYTES + Y_BYTES, "roofs": torch_data["small_roofs"]}
    common["copy_bytes"] = X_BYTES + Y_BYTES
    if name in ROOFLINES:
        _run(bench, common["roofs"][name], kind="copy", **_as_copy(common))
    else:
        kind = "default" if name == "portops" else "baseline"
        _run(bench, _pinv_entries(torch_data["torch"], y, mask)[name], kind=kind, **common)
