"""The cases where portops must be at least as fast as the library's own call, CPU.

``python -m benchmarks.native_parity [rounds]`` times, in interleaved rounds
(``benchmarks/interleave.py``: the order shuffled from round to round, each candidate
after one untimed call), the tall-skinny ``einsum("nc,nc->n")`` (N = 10^6, c = 2) on
NumPy and torch, ``vecdot`` on the same operands and on 500x500 on torch, and
``einsum("bind,jnd->bnij")`` on torch (MXNet's shapes), against every native call that
computes the same; it prints the median per call of each and portops / the fastest
native (the median of per-round ratios, with its 95% interval).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import portops
from benchmarks.interleave import Candidate, Interleaved

Candidates = dict[str, Callable[[], Any]]


def compare(name: str, candidates: Candidates, rounds: int) -> None:
    """Print the median per call of each candidate ("portops" first) and the ratio."""
    kinds = {k: "default" if k == "portops" else "native" for k in candidates}
    timed = Interleaved(
        [Candidate(k, kinds[k], f) for k, f in candidates.items()], seed=name, batch_s=2e-3
    )
    timed.run(min_rounds=rounds, seconds=0.0)
    best = min((k for k in candidates if k != "portops"), key=timed.median)
    r = timed.speedup(best)
    cells = "  ".join(f"{k} {timed.median(k) * 1e3:.3f} ms" for k in candidates)
    ratio = f"{1 / r.median:.2f}x [{1 / r.high:.2f}, {1 / r.low:.2f}]"
    print(f"{name}: {cells}  ->  {ratio} {best}")


def cases() -> dict[str, Candidates]:
    import torch

    gen = np.random.default_rng(0)
    a, b = (gen.standard_normal((1_000_000, 2), dtype=np.float32) for _ in range(2))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    s, t = (torch.from_numpy(gen.standard_normal((500, 500), dtype=np.float32)) for _ in range(2))
    x = torch.from_numpy(gen.standard_normal((64, 100, 8, 128), dtype=np.float32))
    y = torch.from_numpy(gen.standard_normal((50, 8, 128), dtype=np.float32))
    tall = "nc,nc->n"
    return {
        "einsum nc,nc->n NumPy": {
            "portops": lambda: portops.einsum(tall, a, b),
            "np.einsum": lambda: np.einsum(tall, a, b),
            "np.einsum(optimize=True)": lambda: np.einsum(tall, a, b, optimize=True),
            "(a*b).sum(-1)": lambda: (a * b).sum(-1),
            "np.vecdot": lambda: np.vecdot(a, b),
        },
        "einsum nc,nc->n torch": {
            "portops": lambda: portops.einsum(tall, ta, tb),
            "torch.einsum": lambda: torch.einsum(tall, ta, tb),
            "(a*b).sum(-1)": lambda: (ta * tb).sum(-1),
            "torch.linalg.vecdot": lambda: torch.linalg.vecdot(ta, tb),
        },
        "vecdot 10^6x2 torch": {
            "portops": lambda: portops.vecdot(ta, tb),
            "torch.linalg.vecdot": lambda: torch.linalg.vecdot(ta, tb),
            "torch.einsum": lambda: torch.einsum(tall, ta, tb),
            "(a*b).sum(-1)": lambda: (ta * tb).sum(-1),
        },
        "vecdot 500x500 torch": {
            "portops": lambda: portops.vecdot(s, t),
            "torch.linalg.vecdot": lambda: torch.linalg.vecdot(s, t),
            "(a*b).sum(-1)": lambda: (s * t).sum(-1),
            "torch.einsum": lambda: torch.einsum("ij,ij->i", s, t),
            "bmm": lambda: torch.bmm(s[:, None, :], t[:, :, None])[:, 0, 0],
        },
        "einsum bind,jnd->bnij torch": {
            "portops": lambda: portops.einsum("bind,jnd->bnij", x, y),
            "torch.einsum": lambda: torch.einsum("bind,jnd->bnij", x, y),
        },
    }


def main(rounds: int = 31) -> None:
    for name, candidates in cases().items():
        compare(name, candidates, rounds)


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:2]))
