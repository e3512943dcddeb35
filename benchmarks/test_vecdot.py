"""vecdot: portops against the batched dots of the bmm-versus-sum post, and the limit.

The post times, for two (500, 500) float32 tensors, ``(a*b).sum(1, keepdim=True)``
against ``torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).squeeze(2)``, forward and forward +
backward (``.sum().backward()``). The headline comparisons time portops against both as
written, against the library's own calls (``torch.linalg.vecdot``, ``torch.einsum``;
NumPy's ``np.vecdot``, ``np.einsum``, ``(a*b).sum(-1)``) and a copy of the bytes (the
limit). Under ``--full``: 4096x4096, and the CUDA devices. ``PORTOPS_BENCH_QUICK=1``:
tiny sizes. Timings are reported, never asserted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import portops
from benchmarks import sweep
from benchmarks.copies import copy_candidate
from benchmarks.interleave import Candidate, Inputs

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
N = 16 if QUICK else 500  # the post's (500, 500)
LARGE = 64 if QUICK else 4096


def _nbytes(shape: tuple[int, int]) -> int:
    """What vecdot must move: both inputs read, a value per row written (float32)."""
    return 4 * (2 * shape[0] * shape[1] + shape[0])


def _case(shape: tuple[int, int]) -> str:
    return "x".join(map(str, shape)) + " float32"


# -- NumPy ------------------------------------------------------------------------------


def _numpy(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(
        shape, dtype=np.float32
    )


def _numpy_compare(compare: Any, shape: tuple[int, int], headline: bool) -> None:
    d = Inputs(lambda: dict(zip("ab", _numpy(shape), strict=True)))
    compare(
        [
            Candidate("portops", "default", lambda: portops.vecdot(d["a"], d["b"])),
            Candidate("np.vecdot", "native", lambda: np.vecdot(d["a"], d["b"])),
            Candidate("np.einsum", "native", lambda: np.einsum("ij,ij->i", d["a"], d["b"])),
            Candidate("(a*b).sum(-1)", "native", lambda: (d["a"] * d["b"]).sum(-1)),
            copy_candidate(_nbytes(shape) // 2),
        ],
        op="vecdot",
        case=_case(shape),
        backend="numpy",
        label="forward",
        headline=headline,
        nbytes=_nbytes(shape),
        inputs=d,
    )


def test_numpy(compare: Any) -> None:
    _numpy_compare(compare, (N, N), headline=True)


@pytest.mark.full
def test_numpy_large(compare: Any) -> None:
    _numpy_compare(compare, (LARGE, LARGE), headline=False)


# -- PyTorch ----------------------------------------------------------------------------


def _torch_devices() -> list[str]:
    try:
        import torch
    except ImportError:
        return ["cpu"]
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _torch_candidates(torch: Any, d: Inputs, device: str) -> list[Candidate]:
    """portops, the post's two methods as written, the library's own calls, on the
    inputs ``d["a"]`` and ``d["b"]``."""

    def bmm() -> Any:
        return torch.bmm(d["a"].unsqueeze(1), d["b"].unsqueeze(2)).squeeze(2)

    fns: list[tuple[str, str, Callable[[], Any]]] = [
        ("portops", "default", lambda: portops.vecdot(d["a"], d["b"])),
        ("(a*b).sum", "baseline", lambda: (d["a"] * d["b"]).sum(1, keepdim=True)),
        ("bmm", "baseline", bmm),
        ("torch.linalg.vecdot", "native", lambda: torch.linalg.vecdot(d["a"], d["b"])),
        ("torch.einsum", "native", lambda: torch.einsum("ij,ij->i", d["a"], d["b"])),
    ]
    if device == "cpu":
        return [Candidate(*f) for f in fns]

    def synced(fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> None:
            fn()
            torch.cuda.synchronize()

        return call

    return [Candidate(name, kind, synced(fn)) for name, kind, fn in fns]


def _torch_inputs(torch: Any, shape: tuple[int, int], device: str, grad: bool) -> Inputs:
    def build() -> dict[str, Any]:
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
        return {"a": a.requires_grad_(), "b": b.requires_grad_()} if grad else {"a": a, "b": b}

    return Inputs(build)


def _torch_compare(compare: Any, shape: tuple[int, int], device: str, headline: bool) -> None:
    torch = pytest.importorskip("torch")
    d = _torch_inputs(torch, shape, device, grad=False)
    compare(
        [*_torch_candidates(torch, d, device), copy_candidate(_nbytes(shape) // 2, device)],
        op="vecdot",
        case=_case(shape),
        backend="torch",
        device=device,
        label="forward",
        headline=headline,
        nbytes=_nbytes(shape),
        inputs=d,
    )


def _torch_backward(compare: Any, shape: tuple[int, int], device: str, headline: bool) -> None:
    """Forward and backward as the post times it: ``f(a, b).sum().backward()``."""
    torch = pytest.importorskip("torch")
    d = _torch_inputs(torch, shape, device, grad=True)

    def step(c: Candidate) -> Candidate:
        def run() -> None:
            d["a"].grad = d["b"].grad = None
            c.fn().sum().backward()
            if device != "cpu":
                torch.cuda.synchronize()

        return Candidate(c.name, c.kind, run)

    # Backward: both inputs read again, both gradients written.
    compare(
        [
            *(step(c) for c in _torch_candidates(torch, d, "cpu")),
            copy_candidate(_nbytes(shape) // 2, device),
        ],
        op="vecdot",
        case=_case(shape),
        backend="torch",
        device=device,
        label="forward+backward",
        headline=headline,
        nbytes=_nbytes(shape) + 4 * 4 * shape[0] * shape[1],
        inputs=d,
    )


@pytest.mark.parametrize("device", _torch_devices())
def test_torch(compare: Any, device: str) -> None:
    _torch_compare(compare, (N, N), device, headline=True)


@pytest.mark.parametrize("device", _torch_devices())
def test_torch_backward(compare: Any, device: str) -> None:
    _torch_backward(compare, (N, N), device, headline=True)


@pytest.mark.full
@pytest.mark.parametrize("device", _torch_devices())
def test_torch_large(compare: Any, device: str) -> None:
    _torch_compare(compare, (LARGE, LARGE), device, headline=False)


# -- CuPy -------------------------------------------------------------------------------


@pytest.mark.full
@pytest.mark.parametrize("shape", [(N, N), (LARGE, LARGE)], ids=_case)
def test_cupy(compare: Any, shape: tuple[int, int]) -> None:
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # installed without a usable GPU
        pytest.skip(f"cupy has no CUDA device ({exc})")
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal(shape, dtype=cupy.float32)
    b = rng.standard_normal(shape, dtype=cupy.float32)
    sync = cupy.cuda.Device().synchronize

    def synced(fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> None:
            fn()
            sync()

        return call

    compare(
        [
            Candidate("portops", "default", synced(lambda: portops.vecdot(a, b))),
            Candidate("(a*b).sum(-1)", "native", synced(lambda: (a * b).sum(-1))),
            Candidate("cupy.einsum", "native", synced(lambda: cupy.einsum("ij,ij->i", a, b))),
        ],
        op="vecdot",
        case=_case(shape),
        backend="cupy",
        device="cuda",
        label="forward",
        nbytes=_nbytes(shape),
    )


# -- the sweep ----------------------------------------------------------------------------

SWEEP_ROWS = (1, 16, 256, 4096, 65536, 1_000_000)
SWEEP_LENGTHS = (2, 16, 128, 1024, 4096)
SWEEP_MAX = 1 << 22  # elements per input
SWEEP = sweep.grid(
    [
        (rows, n, layout)
        for rows in SWEEP_ROWS
        for n in SWEEP_LENGTHS
        if rows * n <= SWEEP_MAX
        for layout in ("contiguous", "transposed", "broadcast")
    ]
)


def _sweep_inputs(xp: Any, rows: int, n: int, layout: str) -> tuple[Any, Any]:
    """(rows, n) operands: contiguous, transposed views (strided rows), or one (n,) vector."""
    gen = np.random.default_rng(rows + n)
    if layout == "transposed":
        a, b = (gen.standard_normal((n, rows), dtype=np.float32).T for _ in range(2))
    else:
        a = gen.standard_normal((rows, n), dtype=np.float32)
        b = gen.standard_normal((rows, n) if layout == "contiguous" else n, dtype=np.float32)
    return (a, b) if xp is np else (xp.from_numpy(a), xp.from_numpy(b))


@pytest.mark.parametrize(("rows", "n", "layout"), SWEEP, ids=lambda v: str(v))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sweep(compare: Any, backend: str, rows: int, n: int, layout: str) -> None:
    xp = np if backend == "numpy" else pytest.importorskip("torch")
    a, b = _sweep_inputs(xp, rows, n, layout)
    col = b if layout == "broadcast" else b[..., :, None]
    natives: dict[str, Callable[[], Any]] = {
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "matmul": lambda: (a @ b) if layout == "broadcast" else (a[..., None, :] @ col)[..., 0, 0],
    }
    if backend == "numpy":
        natives["np.vecdot"] = lambda: np.vecdot(a, b)
        natives["np.einsum"] = lambda: np.einsum("...i,...i->...", a, b)
    else:
        natives["torch.linalg.vecdot"] = lambda: xp.linalg.vecdot(a, b)
        natives["torch.einsum"] = lambda: xp.einsum("...i,...i->...", a, b)
    sweep.run_point(
        compare,
        lambda: portops.vecdot(a, b),
        natives,
        op="vecdot",
        backend=backend,
        case=f"{rows}x{n} {layout}",
        params={"rows": rows, "n": n, "layout": layout},
        nbytes=4 * rows * n * (1 if layout == "broadcast" else 2),
    )
