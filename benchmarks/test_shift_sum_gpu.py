"""shift_sum family on CUDA (torch and CuPy) against the seed baselines and the roofline.

Cases: B=16, C=28, H=W=256, step=2 and B=1, C=28, H=W=660, step=2, float32
(``PORTOPS_BENCH_QUICK=1``: one tiny case). Each group holds one copy entry (``roofline``): a
device-to-device copy of the bytes the operator must move (x + y), on the same device in
the same run. Each round runs ``CALLS`` calls and synchronises; the per-call time
between CUDA events is stored as ``extra_info["cuda_us"]``. Everything skips without a
CUDA device.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

import portops

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
CASES = [(2, 4, 32, 32, 2)] if QUICK else [(16, 28, 256, 256, 2), (1, 28, 660, 660, 2)]
ROUNDS = 3 if QUICK else 30
CALLS = 2 if QUICK else 10


def _case_id(case: tuple[int, ...]) -> str:
    b, c, h, w, s = case
    return f"B{b} C{c} {h}x{w} step{s} float32"


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def _cupy() -> Any:
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    return cupy


def _time_cuda(bench: Any, fn: Callable[[], Any], library: str, info: dict[str, Any]) -> None:
    """Time `fn` on the GPU: CUDA events for the per-call figure, synchronised rounds.

    Each pytest-benchmark round runs `fn` ``CALLS`` times then synchronises, so launch
    latency overlaps as it does in real code; ``extra_info["cuda_us"]`` is the median
    per-call time between CUDA events over the same kind of rounds.
    """
    if library == "torch":
        import torch

        sync, event = torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True)
    else:
        import cupy

        sync, event = cupy.cuda.Device().synchronize, cupy.cuda.Event

    def run() -> None:
        for _ in range(CALLS):
            fn()
        sync()

    run()
    per_call = []
    for _ in range(ROUNDS):
        start, stop = event(), event()
        start.record()
        for _ in range(CALLS):
            fn()
        stop.record()
        stop.synchronize()
        ms = start.elapsed_time(stop) if library == "torch" else _cupy_ms(start, stop)
        per_call.append(1e3 * ms / CALLS)
    cuda_us = sorted(per_call)[len(per_call) // 2]
    bench(run, **info, rounds=ROUNDS, calls=CALLS, cuda_us=cuda_us)


def _cupy_ms(start: Any, stop: Any) -> float:
    import cupy

    return float(cupy.cuda.get_elapsed_time(start, stop))


def _info(*, op: str, case: str, backend: str, name: str, nbytes: int) -> dict[str, Any]:
    """extra_info of an entry: a copy reads and writes its bytes; portops pinv is a group
    of its own; portops' other implementations and the seeds' are baselines."""
    kind = {"portops": "default", "portops pinv": "default", "roofline": "copy"}.get(name)
    case += " pinv" * (name == "portops pinv")
    info = {"op": op, "case": case, "backend": backend, "device": "cuda", "name": name}
    return info | {"kind": kind or "baseline", "bytes": nbytes * (2 if kind == "copy" else 1)}


# ------------------------------------------------------------------ torch CUDA


def _torch_data(torch: Any, case: tuple[int, ...]) -> dict[str, Any]:
    b, c, h, w, s = case
    wo = w + (c - 1) * s
    g = torch.Generator(device="cuda").manual_seed(2023)
    x = torch.rand(b, c, h, w, device="cuda", generator=g)
    mask = torch.rand(1, 1, h, w, device="cuda", generator=g)
    kernel = torch.zeros(1, c, 1, (c - 1) * s + 1, device="cuda")
    for i in range(c):
        kernel[:, c - i - 1, :, i * s] = 1
    idx = (
        torch.arange(w, device="cuda")
        + torch.arange(c, device="cuda").view(c, 1, 1) * s
        + torch.arange(h, device="cuda").view(1, h, 1) * wo
    )
    indices = idx.view(1, c * h * w).expand(b, c * h * w)
    nbytes = (x.numel() + b * h * wo) * 4
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    y = portops.shift_sum(x, s, keepdims=True)
    return dict(x=x, mask=mask, kernel=kernel, indices=indices, nbytes=nbytes, src=src, dst=dst,
                y=y, wo=wo)  # fmt: skip


TORCH_FORWARD = ["portops", "portops:torch_scatter_add", "portops:torch_slice_add_loop",
                 "roofline", "seed slice-add loop", "seed scatter_add_", "seed conv2d"]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("name", TORCH_FORWARD)
def test_torch_cuda_forward(bench, case, name):
    torch = _torch()
    b, c, h, w, s = case
    d = _torch_data(torch, case)
    x, mask, wo = d["x"], d["mask"], d["wo"]
    info = _info(op="shift_sum", case=_case_id(case) + " mask2d", backend="torch",
          name=name, nbytes=d["nbytes"])  # fmt: skip

    def seed_loop() -> Any:
        z = x * mask
        y = torch.zeros(b, 1, h, wo, device="cuda")
        for i in range(c):
            y[..., i * s : i * s + w] += z[:, i : i + 1]
        return y

    def seed_scatter() -> Any:
        y = torch.zeros(b, h * wo, device="cuda")
        y.scatter_add_(1, d["indices"], (x * mask).view(b, c * h * w))
        return y

    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shift_sum(x, s, mask=mask[0, 0]),
        "roofline": lambda: d["dst"].copy_(d["src"]),
        "seed slice-add loop": seed_loop,
        "seed scatter_add_": seed_scatter,
        "seed conv2d": lambda: torch.nn.functional.conv2d(
            x * mask, d["kernel"], padding=(0, (c - 1) * s)
        ),
    }
    if name.startswith("portops:"):
        alt = name.split(":")[1]

        def fn() -> Any:
            with portops.prefer(shift_sum=alt):
                return portops.shift_sum(x, s, mask=mask[0, 0])

        fns[name] = fn
    _time_cuda(bench, fns[name], "torch", info)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("name", ["portops", "portops pinv", "roofline", "window cat"])
def test_torch_cuda_adjoint(bench, case, name):
    torch = _torch()
    _, c, _, w, s = case
    d = _torch_data(torch, case)
    y, mask = d["y"], d["mask"]
    info = _info(op="shift_sum_adjoint", case=_case_id(case), backend="torch",
          name=name, nbytes=d["nbytes"])  # fmt: skip
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shift_sum_adjoint(y, s, channels=c, keepdims=True),
        "portops pinv": lambda: portops.shift_sum_pinv(y, s, channels=c, mask=mask, keepdims=True),
        "roofline": lambda: d["dst"].copy_(d["src"]),
        "window cat": lambda: torch.cat([y[..., i * s : i * s + w] for i in range(c)], dim=1),
    }
    _time_cuda(bench, fns[name], "torch", info)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("name", ["portops", "roofline", "seed slice-add loop"])
def test_torch_cuda_forward_backward(bench, case, name):
    """Forward + backward through autograd (gradient for x); roofline of the forward."""
    torch = _torch()
    b, c, h, w, s = case
    d = _torch_data(torch, case)
    x = d["x"].clone().requires_grad_()
    mask, wo = d["mask"], d["wo"]
    grad = torch.ones(b, 1, h, wo, device="cuda")
    info = _info(op="shift_sum", case=_case_id(case) + " forward+backward", backend="torch",
          name=name, nbytes=d["nbytes"])  # fmt: skip

    def seed_loop() -> Any:
        z = x * mask
        y = torch.zeros(b, 1, h, wo, device="cuda")
        for i in range(c):
            y[..., i * s : i * s + w] += z[:, i : i + 1]
        return y

    def step(forward: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            forward().backward(grad)

        return run

    fns: dict[str, Callable[[], Any]] = {
        "portops": step(lambda: portops.shift_sum(x, s, mask=mask[0, 0], keepdims=True)),
        "roofline": lambda: d["dst"].copy_(d["src"]),
        "seed slice-add loop": step(seed_loop),
    }
    _time_cuda(bench, fns[name], "torch", info)


# ------------------------------------------------------------------ CuPy


def _cupy_data(cupy: Any, case: tuple[int, ...]) -> dict[str, Any]:
    b, c, h, w, s = case
    wo = w + (c - 1) * s
    rng = cupy.random.default_rng(2023)
    x = rng.random((b, c, h, w), dtype=cupy.float32)
    mask = rng.random((h, w), dtype=cupy.float32)
    nbytes = (x.size + b * h * wo) * 4
    src = cupy.empty(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    y = portops.shift_sum(x, s, keepdims=True)
    return dict(x=x, mask=mask, y=y, nbytes=nbytes, src=src, dst=dst, wo=wo)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("name", ["portops", "roofline", "slice-add loop"])
def test_cupy_forward(bench, case, name):
    cupy = _cupy()
    b, c, h, w, s = case
    d = _cupy_data(cupy, case)
    x, mask, wo = d["x"], d["mask"], d["wo"]
    info = _info(op="shift_sum", case=_case_id(case) + " mask2d", backend="cupy",
          name=name, nbytes=d["nbytes"])  # fmt: skip

    def loop() -> Any:
        z = x * mask
        y = cupy.zeros((b, h, wo), dtype=x.dtype)
        for i in range(c):
            y[..., i * s : i * s + w] += z[:, i]
        return y

    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shift_sum(x, s, mask=mask),
        "roofline": lambda: cupy.copyto(d["dst"], d["src"]),
        "slice-add loop": loop,
    }
    _time_cuda(bench, fns[name], "cupy", info)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("name", ["portops", "portops pinv", "roofline", "window concat"])
def test_cupy_adjoint(bench, case, name):
    cupy = _cupy()
    _, c, _, w, s = case
    d = _cupy_data(cupy, case)
    y, mask = d["y"], d["mask"]
    info = _info(op="shift_sum_adjoint", case=_case_id(case), backend="cupy",
          name=name, nbytes=d["nbytes"])  # fmt: skip
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.shift_sum_adjoint(y, s, channels=c, keepdims=True),
        "portops pinv": lambda: portops.shift_sum_pinv(y, s, channels=c, mask=mask, keepdims=True),
        "roofline": lambda: cupy.copyto(d["dst"], d["src"]),
        "window concat": lambda: cupy.concatenate(
            [y[..., i * s : i * s + w] for i in range(c)], axis=1
        ),
    }
    _time_cuda(bench, fns[name], "cupy", info)
