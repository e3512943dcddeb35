"""vecdot benchmarks: portops against the idioms users write, and the roofline.

Each group ``vecdot <shape> <backend> <device>`` holds portops, the library's own calls
(``(a*b).sum(-1)``, ``bmm``, ``torch.linalg.vecdot``, ``np.vecdot``, ``np.einsum``) and
a copy of the bytes of both inputs into preallocated buffers on the same device.
``PORTOPS_BENCH_QUICK=1`` uses tiny sizes and one or two rounds. Timings are reported,
never asserted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import portops
from benchmarks import sweep

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
SHAPES = [(64, 64), (16, 16)] if QUICK else [(4096, 4096), (500, 500)]


def _plan(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rounds, iterations per round) giving a few tenths of a second per benchmark."""
    if QUICK:
        return 2, 1
    n = int(np.prod(shape))
    return (25, 1) if n >= 1 << 22 else (20, 30)


def _label(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _run(
    bench: Any,
    fn: Callable[[], Any],
    *,
    shape: tuple[int, ...],
    backend: str,
    device: str,
    kind: str,
    name: str,
    suffix: str = "",
    plan: tuple[int, int] | None = None,
) -> None:
    rounds, iterations = plan or _plan(shape)
    info = {"op": "vecdot", "case": _label(shape) + suffix, "backend": backend, "device": device}
    if not suffix:  # the copy reads and writes both inputs; vecdot reads them, writes a row
        inputs = 2 * 4 * int(np.prod(shape))
        info["bytes"] = 2 * inputs if kind == "copy" else inputs + 4 * int(np.prod(shape[:-1]))
    bench(fn, **info, kind=kind, name=name, rounds=rounds, iterations=iterations)


def _kind(name: str, natives: tuple[str, ...]) -> str:
    """default, copy, native (a call of the array's own library) or baseline."""
    return {"portops": "default", "roofline": "copy"}.get(
        name, "native" if name in natives else "baseline"
    )


# -- NumPy ------------------------------------------------------------------------------

NUMPY_CASES = ["portops", "np.vecdot", "np.einsum", "(a*b).sum(-1)", "roofline"]


@pytest.mark.parametrize("shape", SHAPES, ids=_label)
@pytest.mark.parametrize("name", NUMPY_CASES)
def test_numpy(bench: Any, shape: tuple[int, int], name: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape, dtype=np.float32)
    b = rng.standard_normal(shape, dtype=np.float32)
    buf = np.empty((2, *shape), np.float32)
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.vecdot(a, b),
        "np.vecdot": lambda: np.vecdot(a, b),
        "np.einsum": lambda: np.einsum("ij,ij->i", a, b),
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "roofline": lambda: (np.copyto(buf[0], a), np.copyto(buf[1], b)),
    }
    kind = _kind(name, ("np.vecdot", "np.einsum", "(a*b).sum(-1)"))
    _run(bench, fns[name], shape=shape, backend="numpy", device="cpu", kind=kind, name=name)


@pytest.mark.parametrize("name", ["portops", "np.vecdot"])
def test_dispatch_overhead(bench: Any, name: str) -> None:
    """portops minus np.vecdot on an 8x8 array is the dispatch overhead."""
    a = np.ones((8, 8), np.float32)
    fn = (lambda: portops.vecdot(a, a)) if name == "portops" else (lambda: np.vecdot(a, a))
    plan = (2, 10) if QUICK else (20, 2000)
    kind = _kind(name, ("np.vecdot",))
    _run(bench, fn, shape=(8, 8), backend="numpy", device="cpu", kind=kind, name=name, plan=plan)


# -- PyTorch ----------------------------------------------------------------------------

TORCH_CASES = [
    "portops",
    "(a*b).sum(-1)",
    "bmm",
    "torch.linalg.vecdot",
    "np.vecdot",
    "roofline",
]


def _torch_devices() -> list[str]:
    try:
        import torch
    except ImportError:
        return ["cpu"]
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.mark.parametrize("device", _torch_devices())
@pytest.mark.parametrize("shape", SHAPES, ids=_label)
@pytest.mark.parametrize("name", TORCH_CASES)
def test_torch(bench: Any, device: str, shape: tuple[int, int], name: str) -> None:
    torch = pytest.importorskip("torch")
    if name == "np.vecdot" and device != "cpu":
        pytest.skip("NumPy runs on the CPU only")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=gen).to(device)
    b = torch.randn(shape, generator=gen).to(device)
    buf = torch.empty((2, *shape), device=device)
    an, bn = (a.numpy(), b.numpy()) if device == "cpu" else (None, None)
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.vecdot(a, b),
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "bmm": lambda: torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).squeeze(2).squeeze(1),
        "torch.linalg.vecdot": lambda: torch.linalg.vecdot(a, b),
        "np.vecdot": lambda: np.vecdot(an, bn),
        "roofline": lambda: (buf[0].copy_(a), buf[1].copy_(b)),
    }
    fn = fns[name]
    if device == "cuda":
        op = fn

        def fn() -> Any:
            r = op()
            torch.cuda.synchronize()
            return r

    kind = _kind(name, ("(a*b).sum(-1)", "bmm", "torch.linalg.vecdot"))
    _run(bench, fn, shape=shape, backend="torch", device=device, kind=kind, name=name)


@pytest.mark.parametrize("device", _torch_devices())
@pytest.mark.parametrize("shape", SHAPES, ids=_label)
@pytest.mark.parametrize("name", ["portops", "(a*b).sum(-1)", "bmm", "torch.linalg.vecdot"])
def test_torch_backward(bench: Any, device: str, shape: tuple[int, int], name: str) -> None:
    """Forward and backward with respect to both inputs."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=gen).to(device).requires_grad_()
    b = torch.randn(shape, generator=gen).to(device).requires_grad_()
    forward: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.vecdot(a, b),
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "bmm": lambda: torch.bmm(a.unsqueeze(1), b.unsqueeze(2)),
        "torch.linalg.vecdot": lambda: torch.linalg.vecdot(a, b),
    }

    def fn() -> Any:
        grads = torch.autograd.grad(forward[name]().sum(), (a, b))
        if device == "cuda":
            torch.cuda.synchronize()
        return grads

    kind = _kind(name, ("(a*b).sum(-1)", "bmm", "torch.linalg.vecdot"))
    _run(
        bench,
        fn,
        shape=shape,
        backend="torch",
        device=device,
        kind=kind,
        name=f"{name} fwd+bwd",
        suffix=" fwd+bwd",
    )


# -- CuPy -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=_label)
@pytest.mark.parametrize("name", ["portops", "(a*b).sum(-1)", "cupy.einsum", "roofline"])
def test_cupy(bench: Any, shape: tuple[int, int], name: str) -> None:
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # installed without a usable GPU
        pytest.skip(f"cupy has no CUDA device ({exc})")
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal(shape, dtype=cupy.float32)
    b = rng.standard_normal(shape, dtype=cupy.float32)
    buf = cupy.empty((2, *shape), cupy.float32)
    fns: dict[str, Callable[[], Any]] = {
        "portops": lambda: portops.vecdot(a, b),
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "cupy.einsum": lambda: cupy.einsum("ij,ij->i", a, b),
        "roofline": lambda: (buf[0].__setitem__(Ellipsis, a), buf[1].__setitem__(Ellipsis, b)),
    }

    def fn() -> Any:
        r = fns[name]()
        cupy.cuda.Device().synchronize()
        return r

    kind = _kind(name, ("(a*b).sum(-1)", "cupy.einsum"))
    _run(bench, fn, shape=shape, backend="cupy", device="cuda", kind=kind, name=name)


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
def test_sweep(bench: Any, backend: str, rows: int, n: int, layout: str) -> None:
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
        bench,
        lambda: portops.vecdot(a, b),
        natives,
        op="vecdot",
        backend=backend,
        case=f"{rows}x{n} {layout}",
        params={"rows": rows, "n": n, "layout": layout},
        nbytes=4 * rows * n * (1 if layout == "broadcast" else 2),
    )
