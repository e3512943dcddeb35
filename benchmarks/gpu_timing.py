"""GPU timings of portops against what users write, with CUDA events and host time.

``python -m benchmarks.gpu_timing [--quick] [--json PATH] [--text PATH]`` times, on the
first CUDA device, every shift_sum-family case of the GPU acceptance list (B=16, C=28,
256x256 and B=64, C=28, 512x512, step 2, float32), vecdot and einsum, for torch CUDA and
CuPy where installed. For each entry: the GPU time per call (CUDA events around
back-to-back calls, median of rounds, after warm-up), the host time per call (the
Python time to issue the same calls), and the ratio to the *limit*: the bytes the
operation must read and write divided by the device-to-device copy bandwidth measured
in the same run (counted as bytes read + written per second). Every portops result is
checked against a baseline's before it is timed. Beside them: the forward+backward with
its backward on the calling thread (no handoff to autograd's CUDA thread) and torch's own
autograd floor, and the CuPy forward row kernel at other launch configurations and as a
variant of several columns per thread (``benchmarks/cupy_row_wide.cu``): data for its
launch rule.

``--dry-run`` needs no GPU: it checks the options, prints the groups a run would time
(:func:`planned_groups`) and writes them to ``--json`` / ``--text``, so that a script
that reads the results can check the names it expects before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np

import portops

CASES = [(16, 28, 256, 256, 2), (64, 28, 512, 512, 2)]
QUICK_CASES = [(2, 8, 64, 64, 2)]
TINY = (1, 4, 8, 8, 2)
TINY_TAG = "(1,4,8,8)"
VECDOT_SHAPES = [(4096, 4096), (500, 500), (2**20, 3), (64, 65536)]
SHIFT_SUM_OPS = ("forward", "forward + mask", "adjoint", "adjoint + mask", "pinv + mask")
PARTS = ("shift_sum", "tiny", "vecdot", "einsum", "probe")  # the CuPy probes last
EINSUM = [
    ("bnid,bnjd->bnij", [(64, 8, 100, 128), (64, 8, 50, 128)]),
    ("bind,bjnd->bnij", [(64, 100, 8, 128), (64, 50, 8, 128)]),
    ("bind,jnd->bnij", [(64, 100, 8, 128), (50, 8, 128)]),
]


@dataclass
class Entry:
    group: str
    name: str
    gpu_us: float
    host_us: float
    limit_us: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return None if not self.limit_us else self.gpu_us / self.limit_us


class Timer:
    """CUDA-event timing of back-to-back calls for one library."""

    def __init__(self, library: str, calls: int, rounds: int) -> None:
        self.library, self.calls, self.rounds = library, calls, rounds
        if library == "torch":
            import torch

            self.sync = torch.cuda.synchronize
            self.event = lambda: torch.cuda.Event(enable_timing=True)
            self.elapsed = lambda a, b: a.elapsed_time(b)
        else:
            import cupy

            self.sync = cupy.cuda.Device().synchronize
            self.event = cupy.cuda.Event
            self.elapsed = lambda a, b: float(cupy.cuda.get_elapsed_time(a, b))

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(median GPU µs per call, median host µs per call)."""
        for _ in range(3):
            fn()
        self.sync()
        gpu, host = [], []
        for _ in range(self.rounds):
            start, stop = self.event(), self.event()
            start.record()
            t0 = time.perf_counter()
            for _ in range(self.calls):
                fn()
            t1 = time.perf_counter()
            stop.record()
            stop.synchronize()
            gpu.append(1e3 * self.elapsed(start, stop) / self.calls)
            host.append(1e6 * (t1 - t0) / self.calls)
        return statistics.median(gpu), statistics.median(host)


def copy_bandwidth(library: str, timer: Timer) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read + written."""
    n = 64 * 2**20  # float32 elements: 256 MiB each way
    if library == "torch":
        import torch

        src = torch.rand(n, device="cuda")
        dst = torch.empty_like(src)
        gpu, _ = timer(lambda: dst.copy_(src))
    else:
        import cupy

        src = cupy.random.random(n, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        gpu, _ = timer(lambda: cupy.copyto(dst, src))
    return 2 * 4 * n / (gpu * 1e-6)


def _close(got: Any, want: Any, library: str, what: str) -> None:
    to_np = (
        (lambda a: a.detach().float().cpu().numpy())
        if library == "torch"
        else (lambda a: a.get().astype(np.float32))
    )
    g, w = to_np(got), to_np(want)
    g = g.reshape(w.shape) if g.size == w.size else g
    err = float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))
    if not err < 1e-4:
        raise AssertionError(f"{what}: portops differs from the baseline (relative error {err})")


# ----------------------------------------------------------------------------- shift_sum


def case_tag(case: tuple[int, ...]) -> str:
    """``(16, 28, 256, 256, 2)`` -> ``"B16 C28 256x256"``: the groups' name for a case."""
    b, c, h, w, _ = case
    return f"B{b} C{c} {h}x{w}"


def planned_groups(cases: list[tuple[int, ...]], parts: set[str], library: str) -> list[str]:
    """The groups a run times for `library` (torch or cupy), in the order it times them."""
    groups = []
    if "shift_sum" in parts:
        for case in cases:
            groups += [f"{library} {op} {case_tag(case)}" for op in SHIFT_SUM_OPS]
            if library == "torch":
                groups.append(f"torch forward+backward + mask {case_tag(case)}")
    if "tiny" in parts:
        groups.append(f"{library} host path {TINY_TAG}")
    if "vecdot" in parts:
        groups += [f"{library} vecdot {rows}x{n}" for rows, n in VECDOT_SHAPES]
    if "einsum" in parts:
        groups += [f"{library} einsum {eq}" for eq, _ in EINSUM]
    if "probe" in parts and library == "cupy":
        groups += [f"cupy forward row kernel {case_tag(case)}" for case in cases]
    return groups


def _time_group(
    library: str,
    group: str,
    mine: Callable[[], Any],
    baselines: dict[str, Callable[[], Any]],
    limit_us: float | None,
    timer: Timer,
    out: list[Entry],
) -> None:
    """Check portops against every baseline, then time it and them (one group)."""
    for name, base in baselines.items():
        _close(mine(), base(), library, f"{group} vs {name}")
    for name, fn in {"portops": mine, **baselines}.items():
        gpu, host = timer(fn)
        extra = _profiled(fn, host) if name == "portops" else {}
        out.append(Entry(group, name, gpu, host, limit_us, extra))


PROFILED_ABOVE_US = 25.0  # portops' calls of more host time get a host profile (the bar's)


def _profiled(fn: Callable[[], Any], host_us: float) -> dict[str, Any]:
    """A host profile of portops' call `fn` where its host time is over the bar, else {}."""
    return {"host profile": host_profile(fn)} if host_us > PROFILED_ABOVE_US else {}


def shift_sum_torch(case: tuple[int, ...], timer: Timer, bw: float, out: list[Entry]) -> None:
    import torch

    b, c, h, w, s = case
    wo = w + (c - 1) * s
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(b, c, h, w, device="cuda", generator=g)
    mask = torch.rand(h, w, device="cuda", generator=g)
    y = torch.rand(b, h, wo, device="cuda", generator=g)
    kernel = torch.zeros(1, c, 1, (c - 1) * s + 1, device="cuda")
    for i in range(c):
        kernel[:, c - i - 1, :, i * s] = 1
    idx = (torch.arange(w, device="cuda") + torch.arange(c, device="cuda").view(c, 1, 1) * s
           + torch.arange(h, device="cuda").view(1, h, 1) * wo)  # fmt: skip
    indices = idx.view(1, c * h * w).expand(b, c * h * w)
    xb, yb, mb = x.numel() * 4, y.numel() * 4, mask.numel() * 4
    tag = case_tag(case)

    def loop(xx: Any) -> Any:
        yy = torch.zeros(b, h, wo, device="cuda")
        for i in range(c):
            yy[..., i * s : i * s + w] += xx[:, i]
        return yy

    def scatter(xx: Any) -> Any:
        yy = torch.zeros(b, h * wo, device="cuda")
        yy.scatter_add_(1, indices, xx.reshape(b, c * h * w))
        return yy.view(b, h, wo)

    def conv(xx: Any) -> Any:
        return torch.nn.functional.conv2d(xx, kernel, padding=(0, (c - 1) * s))[:, 0]

    groups = {
        "forward": (lambda: portops.shift_sum(x, s), xb + yb, {
            "seed slice-add loop": lambda: loop(x),
            "seed scatter_add_": lambda: scatter(x),
            "seed conv2d": lambda: conv(x),
        }),
        "forward + mask": (lambda: portops.shift_sum(x, s, mask=mask), xb + yb + mb, {
            "seed slice-add loop": lambda: loop(x * mask),
            "seed scatter_add_": lambda: scatter(x * mask),
            "seed conv2d": lambda: conv(x * mask),
        }),
        "adjoint": (lambda: portops.shift_sum_adjoint(y, s, channels=c), xb + yb, {
            "stack of windows": lambda: torch.stack(
                [y[..., i * s : i * s + w] for i in range(c)], dim=1
            ),
        }),
        "adjoint + mask": (lambda: portops.shift_sum_adjoint(y, s, channels=c, mask=mask),
                           xb + yb + mb, {
            "stack of windows": lambda: torch.stack(
                [y[..., i * s : i * s + w] for i in range(c)], dim=1
            ) * mask,
        }),
        "pinv + mask": (lambda: portops.shift_sum_pinv(y, s, channels=c, mask=mask),
                        xb + yb + mb, {}),
    }  # fmt: skip
    assert tuple(groups) == SHIFT_SUM_OPS  # the names planned_groups gives
    for op, (fn, nbytes, baselines) in groups.items():
        _time_group("torch", f"torch {op} {tag}", fn, baselines, nbytes / bw * 1e6, timer, out)
    # Forward + backward with a mask (gradient for x), against the forward's limit.
    xg = x.clone().requires_grad_()
    grad = torch.ones(b, h, wo, device="cuda")

    def step(forward: Callable[[], Any], g: Any = grad) -> Callable[[], None]:
        def run() -> None:
            xg.grad = None
            forward().backward(g)

        return run

    def on_this_thread(run: Callable[[], None]) -> Callable[[], None]:
        """`run` with the backward on the calling thread: no handoff to autograd's CUDA
        thread, and the backward's Python in the host profile."""

        def here() -> None:
            with torch.autograd.set_multithreading_enabled(False):
                run()

        return here

    group = f"torch forward+backward + mask {tag}"
    fwd_limit = (xb + yb + mb) / bw * 1e6
    for name, fn in {
        "portops": step(lambda: portops.shift_sum(xg, s, mask=mask)),
        "portops, backward on this thread": on_this_thread(
            step(lambda: portops.shift_sum(xg, s, mask=mask))
        ),
        "seed slice-add loop": step(lambda: loop(xg * mask)),
        # A floor of torch's autograd on this host: one product and one sum, no shifts.
        "(x * mask).sum(1), for scale": step(
            lambda: (xg * mask).sum(1), torch.ones(b, h, w, device="cuda")
        ),
    }.items():
        gpu, host = timer(fn)
        extra = {"host profile": host_profile(fn)} if name.startswith("portops") else {}
        out.append(Entry(group, name, gpu, host, fwd_limit, extra))


def host_profile(fn: Callable[[], Any], calls: int = 50, top: int = 10) -> list[str]:
    """Where `fn`'s host time goes: the functions of most own time, in µs per call."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.runcall(lambda: [fn() for _ in range(calls)])
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [
        f"{own / calls * 1e6:.1f} us own, {cum / calls * 1e6:.1f} us total: "
        f"{os.path.basename(file)}:{line}({func})"
        for (file, line, func), (_, _, own, cum, _) in rows
    ]


def shift_sum_cupy(case: tuple[int, ...], timer: Timer, bw: float, out: list[Entry]) -> None:
    import cupy

    b, c, h, w, s = case
    wo = w + (c - 1) * s
    rng = cupy.random.default_rng(0)
    x = rng.random((b, c, h, w), dtype=cupy.float32)
    mask = rng.random((h, w), dtype=cupy.float32)
    y = rng.random((b, h, wo), dtype=cupy.float32)
    xb, yb, mb = x.nbytes, y.nbytes, mask.nbytes
    tag = case_tag(case)

    def loop(xx: Any) -> Any:
        yy = cupy.zeros((b, h, wo), dtype=xx.dtype)
        for i in range(c):
            yy[..., i * s : i * s + w] += xx[:, i]
        return yy

    def windows() -> Any:
        return cupy.stack([y[..., i * s : i * s + w] for i in range(c)], axis=1)

    groups = {
        "forward": (lambda: portops.shift_sum(x, s), xb + yb,
                    {"slice-add loop": lambda: loop(x)}),
        "forward + mask": (lambda: portops.shift_sum(x, s, mask=mask), xb + yb + mb,
                           {"slice-add loop": lambda: loop(x * mask)}),
        "adjoint": (lambda: portops.shift_sum_adjoint(y, s, channels=c), xb + yb,
                    {"stack of windows": windows}),
        "adjoint + mask": (lambda: portops.shift_sum_adjoint(y, s, channels=c, mask=mask),
                           xb + yb + mb, {"stack of windows": lambda: windows() * mask}),
        "pinv + mask": (lambda: portops.shift_sum_pinv(y, s, channels=c, mask=mask),
                        xb + yb + mb, {}),
    }  # fmt: skip
    assert tuple(groups) == SHIFT_SUM_OPS  # the names planned_groups gives
    for op, (fn, nbytes, baselines) in groups.items():
        _time_group("cupy", f"cupy {op} {tag}", fn, baselines, nbytes / bw * 1e6, timer, out)


def cupy_probes(case: tuple[int, ...], timer: Timer, bw: float, out: list[Entry]) -> None:
    """The probes of the CuPy forward row kernel on `case` (no mask), last in a run: data
    for its launch rule, judged by no criterion. A probe that fails says so on stderr and
    leaves every timing in place."""
    import cupy

    from portops._ops.shift_sum import ShiftSumArgs

    b, c, h, w, s = case
    x = cupy.random.default_rng(0).random((b, c, h, w), dtype=cupy.float32)
    limit = (x.nbytes + b * h * (w + (c - 1) * s) * 4) / bw * 1e6  # x read, y written
    # The record of the forward call the probes run (step s, no mask), and its result.
    a = ShiftSumArgs.make("forward", x, tuple(i * s for i in range(c)), 3, 1, None, False, cupy)
    expected = portops.shift_sum(x, s)
    for probe in (cupy_row_probe, cupy_wide_probe):
        try:
            probe(a, expected, f"cupy forward row kernel {case_tag(case)}", limit, timer, out)
        except Exception:
            print(f"{probe.__name__} failed (the timings are unaffected):", file=sys.stderr)
            traceback.print_exc()


# Launch configurations of the CuPy forward row kernel that the probe times: threads per
# block (one output column each), and the channel count compiled in or read at run time.
PROBE_THREADS = (128, 256, 512)


def cupy_row_probe(
    a: Any, expected: Any, group: str, limit_us: float, timer: Timer, out: list[Entry]
) -> None:
    """The CuPy forward call `a` through its row kernel at each configuration of
    ``PROBE_THREADS`` x (channels at run time, compiled in): data for its launch rule,
    which picks the narrowest block that wastes few threads and reads the count at run time."""
    from portops._backends.cupy import shift_sum as cupy_shift_sum

    x, channels = a.array, len(a.offsets)
    launcher, tight = cupy_shift_sum._launcher, cupy_shift_sum._tight_block
    try:
        for compiled_in in (False, True):
            for threads in PROBE_THREADS:

                def configured(kernel: str, *args: Any, ch: int = channels * compiled_in) -> Any:
                    return launcher(kernel, *args[:-1], ch)  # the last constant: CHANNELS

                cupy_shift_sum._launcher = configured
                cupy_shift_sum._tight_block = lambda columns, t=threads: t
                run = cupy_shift_sum._row_forward(a, list(a.shape))
                if run is None:
                    raise RuntimeError("the row kernel does not take the probe's array")
                fn = partial(run, x, None)
                if not bool(cupy_shift_sum.cupy.allclose(fn(), expected, rtol=1e-5, atol=1e-5)):
                    raise AssertionError(f"{threads} threads, C compiled in {compiled_in}: wrong")
                gpu, host = timer(fn)
                name = f"{threads} threads, C {'compiled in' if compiled_in else 'at run time'}"
                out.append(Entry(group, name, gpu, host, limit_us))
    finally:
        cupy_shift_sum._launcher, cupy_shift_sum._tight_block = launcher, tight


# The variant benchmarks/cupy_row_wide.cu: COLS columns per thread, at these threads per
# block and COLS, the channel count compiled in.
WIDE = ((128, 2), (128, 4), (256, 2), (256, 4), (128, 8))


def cupy_wide_probe(
    a: Any, expected: Any, group: str, limit_us: float, timer: Timer, out: list[Entry]
) -> None:
    """The CuPy forward call `a` through the kernel of ``benchmarks/cupy_row_wide.cu``
    (several columns per thread) at each configuration of ``WIDE``, each result checked."""
    import cupy

    from portops._backends.cupy import shift_sum as cs
    from portops._kernels.geometry import contiguous_strides, row_view
    from portops._kernels.loader import kernel_name, kernel_source

    x, offsets = a.array, a.offsets
    channels = len(offsets)
    shape = list(x.shape)
    shape[a.axis] += max(offsets)
    shape[a.channel_axis] = 1
    strides = (cs._known_strides(x), contiguous_strides(shape))
    g = cs._geometry(a, x.shape, *strides, None, shape[a.axis])
    r = None if g is None else row_view(g, False)
    if r is None:
        raise RuntimeError("the row kernels do not take the probe's array")
    dtype = np.dtype(a.dtype)
    dtypes = (cs._name(x.dtype), cs._name(x.dtype), cs._name(cs._acc(dtype)), cs._name(dtype))
    table = cs._table_arg(offsets, x.device.id, r.inner)
    record = cs._rows_record(r, offsets, (0, 0, 0))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cupy_row_wide.cu"), encoding="utf-8") as f:
        source = kernel_source("shift_sum.cu") + "\n" + f.read()
    names = {
        cols: kernel_name("shift_sum_forward_rows_wide", dtypes, r.large, (channels, cols))
        for _, cols in WIDE
    }  # one compile of every instance
    module = cupy.RawModule(code=source, options=cs._OPTIONS, name_expressions=(*names.values(),))
    for threads, cols in WIDE:
        kernel = module.get_function(names[cols])
        grid, block = (r.rows, math.ceil(r.out_width / (threads * cols))), (threads,)

        def run(kernel: Any = kernel, grid: Any = grid, block: Any = block) -> Any:
            y = cupy.empty(a.shape, dtype=dtype)
            kernel(grid, block, (x, cs._NULL, y, table, record))
            return y

        if not bool(cupy.allclose(run(), expected, rtol=1e-5, atol=1e-5)):
            raise AssertionError(f"wide kernel, {threads} threads x {cols} columns: wrong")
        gpu, host = timer(run)
        out.append(Entry(group, f"wide: {threads} threads x {cols} columns, C compiled in",
                         gpu, host, limit_us))  # fmt: skip


def tiny_host(library: str, timer: Timer, out: list[Entry]) -> None:
    """Host time per call on a tiny input, where nothing but the host path costs."""
    b, c, h, w, s = TINY
    if library == "torch":
        import torch

        x = torch.rand(b, c, h, w, device="cuda")
        mask = torch.rand(h, w, device="cuda")
        elementwise = lambda: x * 2  # noqa: E731
    else:
        import cupy

        x = cupy.random.random((b, c, h, w), dtype=cupy.float32)
        mask = cupy.random.random((h, w), dtype=cupy.float32)
        elementwise = lambda: x * 2  # noqa: E731
    y = portops.shift_sum(x, s)
    group = f"{library} host path {TINY_TAG}"
    for name, fn in {
        "shift_sum": lambda: portops.shift_sum(x, s),
        "shift_sum + mask": lambda: portops.shift_sum(x, s, mask=mask),
        "adjoint": lambda: portops.shift_sum_adjoint(y, s, channels=c),
        "pinv": lambda: portops.shift_sum_pinv(y, s, channels=c),
        "pinv + mask": lambda: portops.shift_sum_pinv(y, s, channels=c, mask=mask),
        "vecdot": lambda: portops.vecdot(x, x),
        "elementwise x * 2 (reference)": elementwise,
    }.items():
        gpu, host = timer(fn)
        extra = {} if "reference" in name else _profiled(fn, host)  # portops' calls
        out.append(Entry(group, name, gpu, host, extra=extra))


# ----------------------------------------------------------------------------- vecdot, einsum


def _vecdot_natives(library: str, a: Any, b: Any) -> dict[str, Callable[[], Any]]:
    if library == "torch":
        import torch

        return {
            "torch.linalg.vecdot": lambda: torch.linalg.vecdot(a, b),
            "(a*b).sum(-1)": lambda: (a * b).sum(-1),
            "bmm": lambda: torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1),
            "torch.einsum": lambda: torch.einsum("ij,ij->i", a, b),
        }
    import cupy

    natives = {
        "(a*b).sum(-1)": lambda: (a * b).sum(-1),
        "cupy.einsum": lambda: cupy.einsum("ij,ij->i", a, b),
    }
    if hasattr(cupy, "vecdot"):
        natives["cupy.vecdot"] = lambda: cupy.vecdot(a, b)
    return natives


def _random(library: str, shape: tuple[int, ...]) -> Any:
    if library == "torch":
        import torch

        return torch.rand(*shape, device="cuda")
    import cupy

    return cupy.random.random(shape, dtype=cupy.float32)


def vecdot_all(library: str, timer: Timer, bw: float, out: list[Entry]) -> None:
    for rows, n in VECDOT_SHAPES:
        a, b = _random(library, (rows, n)), _random(library, (rows, n))
        natives = _vecdot_natives(library, a, b)
        group = f"{library} vecdot {rows}x{n}"

        def fn(a: Any = a, b: Any = b) -> Any:
            return portops.vecdot(a, b)

        nbytes = 2 * rows * n * 4 + rows * 4
        _time_group(library, group, fn, natives, nbytes / bw * 1e6, timer, out)


def einsum_all(library: str, timer: Timer, out: list[Entry]) -> None:
    for eq, shapes in EINSUM:
        ops = [_random(library, sh) for sh in shapes]
        if library == "torch":
            import torch

            native, name = torch.einsum, "torch.einsum"
        else:
            import cupy

            native, name = cupy.einsum, "cupy.einsum"

        def mine(eq: str = eq, ops: list[Any] = ops) -> Any:
            return portops.einsum(eq, *ops)

        def theirs(eq: str = eq, ops: list[Any] = ops, native: Any = native) -> Any:
            return native(eq, *ops)

        group = f"{library} einsum {eq}"
        _close(mine(), theirs(), library, group)
        gpu, host = timer(mine)
        out.append(Entry(group, "portops", gpu, host))
        gpu, host = timer(theirs)
        out.append(Entry(group, name, gpu, host))


# ----------------------------------------------------------------------------- report


def report(entries: list[Entry], device: str, bandwidths: dict[str, float]) -> str:
    lines = [f"GPU: {device}"]
    for lib, bw in bandwidths.items():
        lines.append(f"device-to-device copy ({lib}): {bw / 1e12:.2f} TB/s (read + write)")
    lines.append("")
    header = (
        f"{'group':<44} {'entry':<28} {'GPU µs':>9} {'host µs':>8} {'x limit':>8} "
        f"{'vs portops':>10}"
    )
    lines += [header, "-" * len(header)]
    by_group: dict[str, list[Entry]] = {}
    for e in entries:
        by_group.setdefault(e.group, []).append(e)
    for group, items in by_group.items():
        mine = next((e for e in items if e.name == "portops"), None)
        for e in items:
            ratio = f"{e.ratio:.2f}x" if e.ratio else ""
            rel = f"{e.gpu_us / mine.gpu_us:.2f}x" if mine and e is not mine else ""
            lines.append(f"{group:<44} {e.name:<28} {e.gpu_us:>9.1f} {e.host_us:>8.1f} "
                         f"{ratio:>8} {rel:>10}")  # fmt: skip
    for e in entries:
        if e.extra.get("host profile"):
            lines += ["", f"host profile of {e.group}, {e.name}:", *e.extra["host profile"]]
    return "\n".join(lines)


def _devices(libraries: list[str]) -> tuple[list[str], str, list[str]]:
    """The libraries of `libraries` that see a CUDA device, its name, and why others don't."""
    usable, device, missing = [], "unknown", []
    for library in libraries:
        try:
            if library == "torch":
                import torch

                if not torch.cuda.is_available():
                    raise RuntimeError("torch has no CUDA device")
                device = torch.cuda.get_device_name()
            else:
                import cupy

                cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # library or device missing
            missing.append(f"{library}: skipped ({type(exc).__name__}: {exc})")
            continue
        usable.append(library)
    return usable, device, missing


def time_part(
    library: str, part: str, cases: list[tuple[int, ...]], timer: Timer, bw: float,
    entries: list[Entry],
) -> None:  # fmt: skip
    """Time one part (of PARTS) for `library` into `entries`."""
    if part == "shift_sum":
        for case in cases:
            (shift_sum_torch if library == "torch" else shift_sum_cupy)(case, timer, bw, entries)
    elif part == "tiny":
        tiny_host(library, Timer(library, 200, 9), entries)
    elif part == "vecdot":
        vecdot_all(library, timer, bw, entries)
    elif part == "einsum":
        einsum_all(library, timer, entries)
    elif library == "cupy":
        for case in cases:
            cupy_probes(case, timer, bw, entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small case, few rounds")
    parser.add_argument("--json", help="write the entries here")
    parser.add_argument("--text", help="write the table here")
    parser.add_argument("--only", default=",".join(PARTS), help="parts, of " + ",".join(PARTS))
    parser.add_argument("--libraries", default="torch,cupy", help="torch and/or cupy")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per entry (median)")
    parser.add_argument(
        "--dry-run", action="store_true", help="no GPU: check the options, list the groups"
    )
    args = parser.parse_args(argv)
    parts = set(filter(None, args.only.split(",")))
    libraries = list(filter(None, args.libraries.split(",")))
    if parts - set(PARTS) or not parts:
        parser.error(f"--only {args.only}: the parts are {', '.join(PARTS)}")
    if set(libraries) - {"torch", "cupy"} or not libraries:
        parser.error(f"--libraries {args.libraries}: torch and/or cupy")
    cases = QUICK_CASES if args.quick else CASES
    calls, rounds = (3, 3) if args.quick else (20, args.rounds)
    plan = {lib: planned_groups(cases, parts, lib) for lib in libraries}
    run = {"quick": args.quick, "cases": cases, "calls": calls, "rounds": rounds}
    if args.dry_run:
        groups = [g for lib in libraries for g in plan[lib]]
        text = "\n".join(["dry run: the groups a run would time", *groups])
        print(text)
        _write(args, text, run | {"dry_run": True, "planned": plan, "entries": []})
        return 0
    usable, device, missing = _devices(libraries)
    for line in missing:
        print(line, file=sys.stderr)
    entries: list[Entry] = []
    bandwidths: dict[str, float] = {}
    errors: list[str] = []
    run |= {"device": device, "planned": plan}

    def write(partial: bool) -> str:
        text = report(entries, device, bandwidths)
        if errors or missing:
            text += "\n\n" + "\n".join(["Not timed:", *missing, *errors])
        data = {"bandwidth": bandwidths, "errors": missing + errors, "partial": partial}
        _write(
            args, text, run | data | {"entries": [asdict(e) | {"ratio": e.ratio} for e in entries]}
        )
        return text

    def failed(what: str, exc: Exception) -> None:
        errors.append(f"{what}: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        print(f"ERROR {errors[-1]}", file=sys.stderr)

    for library in usable:
        try:
            timer = Timer(library, calls, rounds)
            bw = bandwidths[library] = copy_bandwidth(library, timer)
        except Exception as exc:
            failed(f"{library} copy bandwidth", exc)
            continue
        for part in (p for p in PARTS if p in parts):
            try:  # one part's failure leaves the others' timings
                time_part(library, part, cases, timer, bw, entries)
            except Exception as exc:
                failed(f"{library} {part}", exc)
            write(partial=True)  # what is timed so far, should the run be stopped
    print(write(partial=False))
    return 0 if entries and not errors and not missing else 1


def _write(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    if args.text:
        with open(args.text, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
