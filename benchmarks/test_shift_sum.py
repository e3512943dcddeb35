"""shift_sum family: portops against the seed baselines and a copy of the bytes.

Size: B=16, C=28, H=W=256, step=2, float32 (``PORTOPS_BENCH_QUICK=1``: a tiny size).
Each group holds two ``copy`` entries, copies of x + y bytes on the same device with
``np.copyto`` and ``Tensor.copy_``. Every other entry also times both copies just before
each of its rounds and records the median of the faster as ``paired_copy``: the report
divides by that, so the machine's speed, which drifts during a run on a shared host, is
the same on both sides of each ratio.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import portops
from benchmarks import sweep

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
B, C, H, W, S = (2, 4, 32, 32, 2) if QUICK else (16, 28, 256, 256, 2)
WO = W + (C - 1) * S
ROUNDS = 2 if QUICK else 15
SLOW_ROUNDS = 1 if QUICK else 3
CASE = f"B{B} C{C} {H}x{W} step{S} float32"


def _run(
    bench: Any,
    fn: Callable[[], Any],
    *,
    kind: str,
    op: str,
    backend: str,
    name: str,
    group: str,
    rounds: int = ROUNDS,
    nbytes: int = 0,
    roofs: dict[str, Callable[[], Any]] | None = None,
) -> None:
    """Time `fn` as one entry of `group`; all but the copies with both copies paired."""
    info = {"op": op, "case": f"{group} {CASE}", "backend": backend, "device": "cpu"}
    info |= {"kind": kind, "name": name, "bytes": nbytes}  # bytes read + written
    if roofs is None or kind == "copy":
        bench(fn, rounds=rounds, **info)
        return
    copies: list[float] = []
    setup = _timed_copy(roofs, copies, fn)
    b = bench(fn, rounds=rounds, setup=setup, copy_bytes=COPY_BYTES, **info)
    if copies:
        b.extra_info["paired_copy"] = statistics.median(copies[-rounds:])


def _timed_copy(
    roofs: dict[str, Callable[[], Any]], times: list[float], fn: Callable[[], Any]
) -> Callable[[], None]:
    """A setup that times every roofline copy before a round and keeps the fastest.

    It then calls `fn` once, untimed, so the round starts as back-to-back rounds do:
    right after the copies, torch's OpenMP threads could still be spinning, or the
    second core be idle after the single-threaded copy (on a virtual machine an idle
    core takes milliseconds to wake); either would slow the round.
    """

    # Tensor.copy_ first: its OpenMP threads spin on for milliseconds after it, which
    # the single-threaded np.copyto and the untimed call then outlast.
    ordered = sorted(roofs, key=lambda name: name != "copy Tensor.copy_")

    def setup() -> None:
        best = math.inf
        for name in ordered:
            copy = roofs[name]
            t0 = time.perf_counter()
            copy()
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        fn()

    return setup


ROOFLINES = ["copy np.copyto", "copy Tensor.copy_"]


def _copy_rooflines(nbytes: int) -> dict[str, Callable[[], Any]]:
    """Copies of `nbytes` (huge-page NumPy memory) with np.copyto and Tensor.copy_.

    Both are timed in every group and the report takes the faster as the roofline, so
    neither is chosen on a single early measurement.
    """
    src = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copies: dict[str, Callable[[], Any]] = {"copy np.copyto": lambda: np.copyto(dst, src)}
    try:
        import torch
    except ImportError:
        return copies
    ts, td = torch.from_numpy(src), torch.from_numpy(dst)
    copies["copy Tensor.copy_"] = lambda: td.copy_(ts)
    return copies


def _run_roofline(bench: Any, **common: Any) -> None:
    name, roofs = common["name"], common["roofs"]
    if name not in roofs:
        pytest.skip(f"{name}: torch is not installed")
    _run(bench, roofs[name], kind="copy", nbytes=COPY_BYTES, **common)


MASK_BYTES = H * W * 4


X_BYTES = B * C * H * W * 4
Y_BYTES = B * H * WO * 4
COPY_BYTES = 2 * (X_BYTES + Y_BYTES)  # a copy of x + y bytes reads and writes them


@pytest.fixture(scope="module")
def np_data() -> dict[str, Any]:
    rng = np.random.default_rng(2023)
    x = rng.random((B, C, H, W), dtype=np.float32)
    mask = rng.random((H, W), dtype=np.float32)
    y = portops.shift_sum(x, S, keepdims=True)
    return {"x": x, "mask": mask, "y": y, "roofs": _copy_rooflines(X_BYTES + Y_BYTES)}


# ------------------------------------------------------------------ NumPy baselines


def np_slice_add_loop(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The seed's method 1, in NumPy."""
    z = x if mask is None else x * mask
    y = np.zeros((B, 1, H, WO), dtype=x.dtype)
    for i in range(C):
        y[..., i * S : i * S + W] += z[:, i : i + 1]
    return y


def np_add_at(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Scatter with np.add.at to precomputed column indices."""
    z = x if mask is None else x * mask
    y = np.zeros((B, H, WO), dtype=x.dtype)
    cols = np.arange(W)
    for i in range(C):
        np.add.at(y, (slice(None), slice(None), cols + i * S), z[:, i])
    return y


def np_window_concat(y: np.ndarray) -> np.ndarray:
    """The seed's A_pinv without the divisions: concatenate the windows."""
    return np.concatenate([y[..., i * S : i * S + W] for i in range(C)], axis=1)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "mask2d"])
@pytest.mark.parametrize(
    "name", ["portops", "portops:numpy_add_at", *ROOFLINES, "slice-add loop", "np.add.at"]
)
def test_numpy_forward(bench, np_data, name, masked):
    x = np_data["x"]
    mask = np_data["mask"] if masked else None
    group = "forward" + (" mask2d" if masked else "")
    common = {"op": "shift_sum", "backend": "numpy", "group": group, "name": name}
    common["roofs"] = np_data["roofs"]
    if name not in ROOFLINES:
        common["nbytes"] = X_BYTES + Y_BYTES + (MASK_BYTES if masked else 0)
    if name == "portops":
        _run(bench, lambda: portops.shift_sum(x, S, mask=mask), kind="default", **common)
    elif name == "portops:numpy_add_at":

        def alt() -> Any:
            with portops.prefer(shift_sum="numpy_add_at"):
                return portops.shift_sum(x, S, mask=mask)

        _run(bench, alt, kind="baseline", rounds=SLOW_ROUNDS, **common)
    elif name in ROOFLINES:
        _run_roofline(bench, **common)
    elif name == "slice-add loop":
        _run(bench, lambda: np_slice_add_loop(x, mask), kind="baseline", **common)
    else:
        _run(bench, lambda: np_add_at(x, mask), kind="baseline", rounds=SLOW_ROUNDS, **common)


@pytest.mark.parametrize("name", ["portops", "portops pinv", *ROOFLINES, "window concat"])
def test_numpy_adjoint(bench, np_data, name):
    y, mask = np_data["y"], np_data["mask"]
    common = {"op": "shift_sum_adjoint", "backend": "numpy", "group": "adjoint", "name": name}
    common["roofs"] = np_data["roofs"]
    if name not in ROOFLINES:
        common["nbytes"] = X_BYTES + Y_BYTES + (MASK_BYTES if name == "portops pinv" else 0)
    if name == "portops":
        fn = lambda: portops.shift_sum_adjoint(y, S, channels=C, keepdims=True)  # noqa: E731
        _run(bench, fn, kind="default", **common)
    elif name == "portops pinv":  # a group of its own: the default of another operation
        fn = lambda: portops.shift_sum_pinv(y, S, channels=C, mask=mask, keepdims=True)  # noqa: E731
        _run(bench, fn, kind="default", **(common | {"group": "pinv mask2d"}))
    elif name in ROOFLINES:
        _run_roofline(bench, **common)
    else:
        _run(bench, lambda: np_window_concat(y), kind="baseline", **common)


# ------------------------------------------------------------------ dispatch overhead


@pytest.mark.parametrize("name", ["portops.shift_sum", "implementation called directly", "select"])
def test_small_call_overhead(bench, name):
    from portops import _dispatch
    from portops._ops.shift_sum import _prepare_forward

    x = np.ones((2, 3, 4, 5), dtype=np.float32)
    call = _prepare_forward(x, 1)
    impl = _dispatch.select("shift_sum", call)
    fn: Callable[[], Any] = {
        "portops.shift_sum": lambda: portops.shift_sum(x, 1),
        "implementation called directly": lambda: impl.func(call.args),
        "select": lambda: _dispatch.select("shift_sum", call),
    }[name]
    kind = "default" if name == "portops.shift_sum" else "baseline"
    info = {"op": "shift_sum", "case": "small call (2, 3, 4, 5)", "backend": "numpy"}
    bench(fn, **info, device="cpu", kind=kind, name=name, rounds=2000, iterations=10, warmup=10)


# ------------------------------------------------------------------ torch CPU


@pytest.fixture(scope="module")
def torch_data(np_data: dict[str, Any]) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(2023)
    x = torch.rand(B, C, H, W)
    mask = torch.rand(1, 1, H, W)
    # The seed's precomputed tables (method 2's kernel, method 3's indices).
    kernel = torch.zeros(1, C, 1, (C - 1) * S + 1)
    for i in range(C):
        kernel[:, C - i - 1, :, i * S] = 1
    i_list = torch.arange(C, dtype=torch.long)
    y_list = torch.arange(H, dtype=torch.long)
    x_list = torch.arange(W, dtype=torch.long)
    indices = x_list + i_list.view(C, 1, 1) * S + y_list.view(1, H, 1) * WO
    indices = indices.view(1, C * H * W).expand(B, C * H * W)
    y = portops.shift_sum(x, S, keepdims=True)
    return {
        "torch": torch,
        "x": x,
        "mask": mask,
        "kernel": kernel,
        "indices": indices,
        "y": y,
        "roofs": np_data["roofs"],
    }


def seed_loop(torch: Any, x: Any, mask: Any) -> Any:
    """The seed's method 1 (A); without a mask, no multiply (the fairest form)."""
    z = x if mask is None else x * mask
    y = torch.zeros(B, 1, H, WO, device=x.device)
    for i in range(C):
        y[..., (i * S) : (i * S + W)] += z[:, (i) : (i + 1)]
    return y


def seed_conv2d(torch: Any, x: Any, mask: Any, kernel: Any) -> Any:
    """The seed's method 2 (A_fast)."""
    z = x if mask is None else x * mask
    return torch.nn.functional.conv2d(z, kernel, padding=(0, (C - 1) * S))


def seed_scatter_add(torch: Any, x: Any, mask: Any, indices: Any) -> Any:
    """The seed's method 3 (A_faster)."""
    y = torch.zeros(B, H * WO, device=x.device)
    y.scatter_add_(1, indices, (x if mask is None else x * mask).view(B, C * H * W))
    return y.view(B, 1, H, WO)


TORCH_FORWARD = [
    "portops",
    "portops:torch_scatter_add",
    *ROOFLINES,
    "seed slice-add loop",
    "seed conv2d",
    "seed scatter_add_",
]


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "mask2d"])
@pytest.mark.parametrize("name", TORCH_FORWARD)
def test_torch_forward(bench, torch_data, name, masked):
    t = torch_data
    torch, x, kernel, indices = t["torch"], t["x"], t["kernel"], t["indices"]
    mask = pmask = t["mask"] if masked else None
    group = "forward" + (" mask2d" if masked else "")
    common = {"op": "shift_sum", "backend": "torch", "group": group, "name": name}
    common["roofs"] = t["roofs"]
    if name not in ROOFLINES:
        common["nbytes"] = X_BYTES + Y_BYTES + (MASK_BYTES if masked else 0)
    if name == "portops":
        _run(bench, lambda: portops.shift_sum(x, S, mask=pmask), kind="default", **common)
    elif name == "portops:torch_scatter_add":

        def alt() -> Any:
            with portops.prefer(shift_sum="torch_scatter_add"):
                return portops.shift_sum(x, S, mask=pmask)

        _run(bench, alt, kind="baseline", rounds=SLOW_ROUNDS, **common)
    elif name in ROOFLINES:
        _run_roofline(bench, **common)
    elif name == "seed slice-add loop":
        _run(bench, lambda: seed_loop(torch, x, mask), kind="baseline", **common)
    elif name == "seed conv2d":
        fn = lambda: seed_conv2d(torch, x, mask, kernel)  # noqa: E731
        _run(bench, fn, kind="baseline", rounds=SLOW_ROUNDS, **common)
    else:
        fn = lambda: seed_scatter_add(torch, x, mask, indices)  # noqa: E731
        _run(bench, fn, kind="baseline", rounds=SLOW_ROUNDS, **common)


@pytest.mark.parametrize("name", ["portops", "portops pinv", *ROOFLINES, "window cat"])
def test_torch_adjoint(bench, torch_data, name):
    t = torch_data
    torch, y, mask = t["torch"], t["y"], t["mask"]
    common = {"op": "shift_sum_adjoint", "backend": "torch", "group": "adjoint", "name": name}
    common["roofs"] = t["roofs"]
    if name not in ROOFLINES:
        common["nbytes"] = X_BYTES + Y_BYTES + (MASK_BYTES if name == "portops pinv" else 0)
    if name == "portops":
        fn = lambda: portops.shift_sum_adjoint(y, S, channels=C, keepdims=True)  # noqa: E731
        _run(bench, fn, kind="default", **common)
    elif name == "portops pinv":  # a group of its own: the default of another operation
        fn = lambda: portops.shift_sum_pinv(y, S, channels=C, mask=mask, keepdims=True)  # noqa: E731
        _run(bench, fn, kind="default", **(common | {"group": "pinv mask2d"}))
    elif name in ROOFLINES:
        _run_roofline(bench, **common)
    else:
        fn = lambda: torch.cat([y[..., i * S : i * S + W] for i in range(C)], dim=1)  # noqa: E731
        _run(bench, fn, kind="baseline", **common)


@pytest.mark.parametrize("name", ["portops", *ROOFLINES, "seed slice-add loop"])
def test_torch_forward_backward(bench, torch_data, name):
    """Forward + backward through autograd, gradients for x; roofline of the forward."""
    t = torch_data
    torch, mask = t["torch"], t["mask"]
    x = t["x"].clone().requires_grad_()
    grad = torch.ones(B, 1, H, WO)
    common = {"op": "shift_sum", "backend": "torch", "group": "forward+backward", "name": name}
    common["roofs"] = t["roofs"]

    def run(forward: Callable[[], Any]) -> Callable[[], Any]:
        def step() -> None:
            x.grad = None
            forward().backward(grad)

        return step

    if name == "portops":
        fn = run(lambda: portops.shift_sum(x, S, mask=mask[0, 0], keepdims=True))
        _run(bench, fn, kind="default", **common)
    elif name in ROOFLINES:
        _run_roofline(bench, **common)
    else:
        _run(bench, run(lambda: seed_loop(torch, x, mask)), kind="baseline", **common)


# ------------------------------------------------------------------ the sweep

SWEEP_MAX_BYTES = 1 << 26  # x at most 64 MB: B=16 with C >= 28 at 256 or H=W=660, B=1 C=64 660 out
SWEEP = sweep.grid(
    [
        (b, c, h, step, layout, masked)
        for b in (1, 16)
        for c in (8, 28, 64)
        for h in (64, 256, 660)
        if 4 * b * c * h * h <= SWEEP_MAX_BYTES
        for step in (1, 2)
        for layout in ("channels-first", "channels-last")
        for masked in (False, True)
    ]
)


def sweep_loop(xp: Any, x: Any, mask: Any, step: int, last: bool) -> Any:
    """The seed's slice-add loop in its fairest form: no mask multiply without a mask."""
    z = x if mask is None else x * mask
    b, c = x.shape[0], x.shape[-1 if last else 1]
    h, w = x.shape[1:3] if last else x.shape[2:]
    y = xp.zeros((b, h, w + (c - 1) * step), dtype=x.dtype)
    for i in range(c):
        y[..., i * step : i * step + w] += z[..., i] if last else z[:, i]
    return y


@pytest.mark.parametrize(("b", "c", "h", "step", "layout", "masked"), SWEEP, ids=str)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sweep(bench, backend, b, c, h, step, layout, masked):
    xp = np if backend == "numpy" else pytest.importorskip("torch")
    last = layout == "channels-last"
    gen = np.random.default_rng(c + h)
    x = gen.random((b, h, h, c) if last else (b, c, h, h), dtype=np.float32)
    mask = gen.random((h, h, 1) if last else (h, h), dtype=np.float32) if masked else None
    if xp is not np:
        x, mask = xp.from_numpy(x), None if mask is None else xp.from_numpy(mask)
    axes = {"channel_axis": -1, "axis": -2} if last else {}
    wo = h + (c - 1) * step
    sweep.run_point(
        bench,
        lambda: portops.shift_sum(x, step, mask=mask, **axes),
        {"slice-add loop": lambda: sweep_loop(xp, x, mask, step, last)},
        op="shift_sum",
        backend=backend,
        case=f"B{b} C{c} {h}x{h} step{step} {layout}" + (" mask" if masked else ""),
        params={"B": b, "C": c, "H": h, "step": step, "layout": layout, "mask": masked},
        nbytes=4 * (b * c * h * h + b * h * wo + (h * h if masked else 0)),
    )
