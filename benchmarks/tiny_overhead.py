"""Per-call cost on tiny inputs, CPU: portops against the call users write themselves.

``python -m benchmarks.tiny_overhead`` times, on (1, 4, 8, 8) float64 arrays, shift_sum
with and without a mask against the seed's slice-add loop, its adjoint against a stack
of windows, vecdot against the library's own, and ``einsum("bchw,bchw->bc")`` against
the library's einsum, for NumPy and torch CPU (one thread): medians of interleaved
rounds, and the difference per call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import portops

Case = tuple[str, Callable[[], Any], Callable[[], Any]]


def per_call(fn: Callable[[], Any], n: int = 400) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def compare(name: str, mine: Callable[[], Any], native: Callable[[], Any], rounds: int) -> None:
    for _ in range(200):
        mine()
        native()
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(per_call(mine))
        theirs.append(per_call(native))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{name:<34} portops {a:7.1f} µs  native {b:7.1f} µs  difference {a - b:+6.1f} µs")


def cases(lib: str) -> list[Case]:
    rng = np.random.default_rng(0)
    x_np, m_np = rng.random((1, 4, 8, 8)), rng.random((8, 8))
    if lib == "numpy":
        x, m = x_np, m_np

        def zeros() -> Any:
            return np.zeros((1, 1, 8, 14))

        stack, vecdot, einsum = np.stack, np.vecdot, np.einsum
    else:
        import torch

        torch.set_num_threads(1)
        x, m = torch.from_numpy(x_np), torch.from_numpy(m_np)

        def zeros() -> Any:
            return torch.zeros(1, 1, 8, 14, dtype=torch.float64)

        stack, vecdot, einsum = torch.stack, torch.linalg.vecdot, torch.einsum
    y = portops.shift_sum(x, 2)

    def loop() -> Any:  # the seed's slice-add loop, unmasked
        out = zeros()
        for i in range(4):
            out[..., 2 * i : 2 * i + 8] += x[:, i : i + 1]
        return out

    def masked_loop() -> Any:
        out = zeros()
        for i in range(4):
            out[..., 2 * i : 2 * i + 8] += x[:, i : i + 1] * m
        return out

    return [
        ("shift_sum", lambda: portops.shift_sum(x, 2), loop),
        ("shift_sum + mask", lambda: portops.shift_sum(x, 2, mask=m), masked_loop),
        (
            "adjoint",
            lambda: portops.shift_sum_adjoint(y, 2, channels=4),
            lambda: stack([y[..., 2 * i : 2 * i + 8] for i in range(4)], 1),
        ),
        ("vecdot", lambda: portops.vecdot(x, x), lambda: vecdot(x, x)),
        (
            "einsum bchw,bchw->bc",
            lambda: portops.einsum("bchw,bchw->bc", x, x),
            lambda: einsum("bchw,bchw->bc", x, x),
        ),
    ]


def main(rounds: int = 15) -> None:
    for lib in ("numpy", "torch"):
        for name, mine, native in cases(lib):
            compare(f"{lib} {name}", mine, native, rounds)


if __name__ == "__main__":
    main()
