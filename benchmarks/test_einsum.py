"""einsum at the MXNet issue 18043 shapes: portops against the native einsums.

Size: B=64, 8 heads, 100 and 50 positions, 128 units, float32 (``PORTOPS_BENCH_QUICK=1``:
a tiny size). Each of the issue's three patterns is a headline comparison per library:
portops against the library's einsum (NumPy: with and without ``optimize``) and the
issue's hand-written matmul ("no_einsum" mode). Under ``--full``: opt_einsum and the
batched GEMM of the same sizes on contiguous operands (the fastest the contraction can
be), a cached call on tiny operands (the per-call cost) and the CUDA devices.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import portops
from benchmarks import sweep
from benchmarks.interleave import Candidate, Inputs

QUICK = os.environ.get("PORTOPS_BENCH_QUICK") == "1"
B, HEADS, SEQ_A, SEQ_B, UNITS = (2, 2, 5, 3, 4) if QUICK else (64, 8, 100, 50, 128)
CASE = f"B{B} heads{HEADS} {SEQ_A}x{SEQ_B} units{UNITS} float32"

# pattern -> (shape of the first operand, shape of the second)
PATTERNS = {
    "bnid,bnjd->bnij": ((B, HEADS, SEQ_A, UNITS), (B, HEADS, SEQ_B, UNITS)),
    "bind,bjnd->bnij": ((B, SEQ_A, HEADS, UNITS), (B, SEQ_B, HEADS, UNITS)),
    "bind,jnd->bnij": ((B, SEQ_A, HEADS, UNITS), (SEQ_B, HEADS, UNITS)),
}


def _hand_written(xp_matmul: Callable[..., Any], pattern: str) -> Callable[[Any, Any], Any]:
    """The matmul code of issue 18043's 'no_einsum' mode, for arrays with swapaxes."""
    if pattern == "bnid,bnjd->bnij":
        return lambda a, b: xp_matmul(a, b.swapaxes(-1, -2))
    if pattern == "bind,bjnd->bnij":
        return lambda a, b: xp_matmul(a.swapaxes(1, 2), b.swapaxes(1, 2).swapaxes(-1, -2))
    return lambda a, b: xp_matmul(
        a.swapaxes(1, 2), b.permute(1, 2, 0) if hasattr(b, "permute") else b.transpose(1, 2, 0)
    )


def _make_operands(pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """The pattern's two operands: the same values at every call, in new memory."""
    rng = np.random.default_rng(18043)
    sa, sb = PATTERNS[pattern]
    return (
        rng.standard_normal(sa, dtype=np.float32),
        rng.standard_normal(sb, dtype=np.float32),
    )


_operands = functools.cache(_make_operands)  # made once per pattern, beyond the headline


def _inputs(pattern: str, convert: Callable[[np.ndarray], Any] = lambda x: x) -> Inputs:
    """A headline comparison's operands ``a`` and ``b`` (`convert`-ed), made anew per visit."""

    def build() -> dict[str, Any]:
        a, b = _make_operands(pattern)
        return {"a": convert(a), "b": convert(b)}

    return Inputs(build)


@functools.cache
def _reference(pattern: str) -> np.ndarray:
    """The einsum of the pattern's operands, each candidate's result is checked against."""
    return np.einsum(pattern, *_operands(pattern), optimize=True)


def _checked(candidates: list[Candidate], pattern: str) -> list[Candidate]:
    for c in candidates:
        np.testing.assert_allclose(np.asarray(c.fn()), _reference(pattern), rtol=2e-3, atol=2e-3)
    return candidates


def _gemm_operands() -> tuple[np.ndarray, np.ndarray]:
    """Contiguous (batch, M, K) and (batch, K, N) operands of the patterns' GEMM sizes."""
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((B * HEADS, SEQ_A, UNITS), dtype=np.float32),
        rng.standard_normal((B * HEADS, UNITS, SEQ_B), dtype=np.float32),
    )


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_numpy(compare: Any, pattern: str) -> None:
    d, matmul = _inputs(pattern), _hand_written(np.matmul, pattern)
    candidates = [
        Candidate("portops", "default", lambda: portops.einsum(pattern, d["a"], d["b"])),
        Candidate("np.einsum", "native", lambda: np.einsum(pattern, d["a"], d["b"])),
        Candidate(
            "np.einsum(optimize=True)",
            "native",
            lambda: np.einsum(pattern, d["a"], d["b"], optimize=True),
        ),
        Candidate("hand-written matmul", "baseline", lambda: matmul(d["a"], d["b"])),
    ]
    compare(
        _checked(candidates, pattern),
        op="einsum",
        case=f"{pattern} {CASE}",
        backend="numpy",
        label=pattern,
        headline=True,
        inputs=d,
    )


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_torch(compare: Any, pattern: str) -> None:
    torch = pytest.importorskip("torch")
    d, matmul = _inputs(pattern, torch.from_numpy), _hand_written(torch.matmul, pattern)
    candidates = [
        Candidate("portops", "default", lambda: portops.einsum(pattern, d["a"], d["b"])),
        Candidate("torch.einsum", "native", lambda: torch.einsum(pattern, d["a"], d["b"])),
        Candidate("hand-written matmul", "baseline", lambda: matmul(d["a"], d["b"])),
    ]
    compare(
        _checked(candidates, pattern),
        op="einsum",
        case=f"{pattern} {CASE}",
        backend="torch",
        label=pattern,
        headline=True,
        inputs=d,
    )


@pytest.mark.full
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_peers_and_gemm(compare: Any, backend: str) -> None:
    """bnid,bnjd->bnij against opt_einsum and the batched GEMM of the same sizes on
    operands already laid out contiguously (the fastest the contraction can be)."""
    pattern = "bnid,bnjd->bnij"
    a, b = _operands(pattern)
    ga, gb = _gemm_operands()
    mod: Any = np
    if backend == "torch":
        mod = pytest.importorskip("torch")
        a, b, ga, gb = (mod.from_numpy(x) for x in (a, b, ga, gb))
    oe = pytest.importorskip("opt_einsum")
    compare(
        [
            Candidate("portops", "default", lambda: portops.einsum(pattern, a, b)),
            Candidate("opt_einsum.contract", "baseline", lambda: oe.contract(pattern, a, b)),
            Candidate("batched GEMM, contiguous", "native", lambda: mod.matmul(ga, gb)),
        ],
        op="einsum",
        case=f"{pattern} {CASE}",
        backend=backend,
        label=f"{pattern}, peers",
    )


@pytest.mark.full
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_cached_call_overhead(compare: Any, backend: str) -> None:
    """A repeated call on tiny operands: portops' per-call cost over the bare matmul."""
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    matmul: Any = np.matmul
    if backend == "torch":
        torch = pytest.importorskip("torch")
        a, b, matmul = torch.from_numpy(a), torch.from_numpy(b), torch.matmul
    compare(
        [
            Candidate("portops", "default", lambda: portops.einsum("ij,jk->ik", a, b)),
            Candidate("matmul", "native", lambda: matmul(a, b)),
        ],
        op="einsum",
        case="ij,jk->ik 3x4x5 float32",
        backend=backend,
        label="ij,jk->ik tiny",
    )


def _cuda_arrays(library: str, pattern: str) -> tuple[Any, Any, Any, Any]:
    """(module, a, b, synchronize) on the GPU, or skip when there is none."""
    a, b = _operands(pattern)
    if library == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch has no CUDA device")
        return torch, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), torch.cuda.synchronize
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver or no device
        pytest.skip(f"cupy has no CUDA device ({exc})")
    return cupy, cupy.asarray(a), cupy.asarray(b), cupy.cuda.Device().synchronize


@pytest.mark.full
@pytest.mark.parametrize("library", ["torch", "cupy"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_cuda(compare: Any, library: str, pattern: str) -> None:
    """The issue's own device: each pattern against the native einsum and the matmul."""
    mod, a, b, sync = _cuda_arrays(library, pattern)

    def synced(fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> None:
            fn()
            sync()

        return call

    compare(
        [
            Candidate("portops", "default", synced(lambda: portops.einsum(pattern, a, b))),
            Candidate("native einsum", "native", synced(lambda: mod.einsum(pattern, a, b))),
            Candidate(
                "hand-written matmul",
                "baseline",
                synced(lambda: _hand_written(mod.matmul, pattern)(a, b)),
            ),
        ],
        op="einsum",
        case=f"{pattern} {CASE}",
        backend=library,
        device="cuda",
        label=pattern,
        headline=True,
    )


# -- the sweep ----------------------------------------------------------------------------

# equation -> label sizes at the large scale; small and medium shrink every label.
SWEEP_EQUATIONS = {
    "bhid,bhjd->bhij": dict(b=8, h=8, i=128, j=128, d=64),  # attention scores
    "bhij,bhjd->bhid": dict(b=8, h=8, i=128, j=128, d=64),  # attention output
    "bind,bjnd->bnij": dict(b=64, i=100, j=50, n=8, d=128),  # MXNet 18043
    "bind,jnd->bnij": dict(b=64, i=100, j=50, n=8, d=128),
    "bi,ij,bj->b": dict(b=4096, i=256, j=256),  # bilinear form
    "bn,anm,bm->ba": dict(b=256, a=64, n=64, m=64),  # bilinear layer
    "i,j->ij": dict(i=2048, j=2048),  # outer
    "bi,bj->bij": dict(b=256, i=128, j=128),  # batched outer
    "ii->": dict(i=4096),  # trace
    "ii->i": dict(i=4096),  # diagonal
    "bii->bi": dict(b=256, i=256),  # batched diagonal
    "nc,nc->n": dict(n=1_000_000, c=2),  # tall-skinny (pytorch issue 101249)
    "bij,bjk->bik": dict(b=64, i=128, j=128, k=128),  # batched matmul
    "ij,jk->ik": dict(i=1024, j=1024, k=1024),  # matmul
    "ij,jk,kl->il": dict(i=512, j=64, k=512, l=512),  # matrix chain
    "ij,jk,kl,lm->im": dict(i=256, j=512, k=16, l=512, m=256),
    "ij->": dict(i=2048, j=2048),  # sum
    "ij->i": dict(i=2048, j=2048),  # row sums
    "ij,j->i": dict(i=4096, j=1024),  # matrix-vector
    "i,i->": dict(i=1_000_000),  # dot
    "ij,ij->ij": dict(i=2048, j=2048),  # Hadamard
    "abc,cd->abd": dict(a=64, b=64, c=128, d=128),  # tensor contraction
}
NAIVE_MAX = 1 << 28  # np.einsum without optimize loops over every label combination
VIEWS = ("ii->i", "bii->bi")  # equations whose NumPy and torch results are views


def _copied(r: Any, copy: bool) -> Any:
    return (r.clone() if hasattr(r, "clone") else r.copy()) if copy else r


SWEEP_SCALES = {"small": 1 / 64, "medium": 1 / 8, "large": 1.0}
SWEEP = sweep.grid([(eq, scale) for eq in SWEEP_EQUATIONS for scale in SWEEP_SCALES])


def _sweep_operands(xp: Any, eq: str, scale: str) -> list[Any]:
    sizes = {k: max(2, round(v * SWEEP_SCALES[scale])) for k, v in SWEEP_EQUATIONS[eq].items()}
    gen = np.random.default_rng(len(eq))
    arrays = [
        gen.standard_normal([sizes[c] for c in term], dtype=np.float32)
        for term in eq.split("->")[0].split(",")
    ]
    return arrays if xp is np else [xp.from_numpy(x) for x in arrays]


@pytest.mark.parametrize(("eq", "scale"), SWEEP, ids=lambda v: str(v))
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sweep(compare: Any, backend: str, eq: str, scale: str) -> None:
    xp = np if backend == "numpy" else pytest.importorskip("torch")
    ops = _sweep_operands(xp, eq, scale)
    # NumPy and torch return a view of the operand for a diagonal; portops never returns
    # a view of an input, so the fair native call copies it (what a caller who keeps
    # the result apart from the operand writes).
    copy = eq in VIEWS
    if backend == "numpy":
        natives: dict[str, Callable[[], Any]] = {
            "np.einsum(optimize=True)": lambda: _copied(np.einsum(eq, *ops, optimize=True), copy)
        }
        sizes = {
            k: n
            for x, term in zip(ops, eq.split("->")[0].split(","), strict=True)
            for k, n in zip(term, x.shape, strict=True)
        }
        if math.prod(sizes.values()) <= NAIVE_MAX:  # else it runs for minutes
            natives["np.einsum"] = lambda: _copied(np.einsum(eq, *ops), copy)
    else:
        natives = {"torch.einsum": lambda: _copied(xp.einsum(eq, *ops), copy)}
    sweep.run_point(
        compare,
        lambda: portops.einsum(eq, *ops),
        natives,
        op="einsum",
        backend=backend,
        case=f"{eq} {scale}",
        params={"equation": eq, "scale": scale},
        nbytes=sum(4 * math.prod(x.shape) for x in ops),
    )
