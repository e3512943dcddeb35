"""shift_sum family against the methods of the shift-and-sum question, at its shape.

The question (a CASSI forward operator, B=16, C=28, H=W=256, step 2, float32) writes the
forward ``A`` as a slice-add loop, ``A_fast`` as a conv2d with a (C, 55) kernel and,
in its answer, ``A_faster`` as a ``scatter_add_``; its pseudo-inverse ``A_pinv`` divides
by the overlap count, concatenates the windows and divides by the mask (``A_pinv_fast``:
the same through ``conv_transpose2d``). Each headline comparison times portops against
those methods as written (the unmasked ones without the mask multiply, their fairest
form) and against a copy of the bytes the operation must move (the hardware limit).
``PORTOPS_BENCH_QUICK=1``: a tiny shape.
"""

from __future__ import annotations

import functools
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
B, C, H, W, S = (2, 4, 32, 32, 2) if QUICK else (16, 28, 256, 256, 2)
WO = W + (C - 1) * S
CASE = f"B{B} C{C} {H}x{W} step{S} float32"
X_BYTES, Y_BYTES, MASK_BYTES = 4 * B * C * H * W, 4 * B * H * WO, 4 * H * W
# Every comparison here copies the same bytes (x + y): one size, one best copy of the run.
COPY_BYTES = (X_BYTES + Y_BYTES) // 2


def _copy() -> Candidate:
    return copy_candidate(COPY_BYTES)


def _build_numpy() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2023)
    x = rng.random((B, C, H, W), dtype=np.float32)
    mask = rng.random((H, W), dtype=np.float32)
    return {"x": x, "mask": mask, "y": portops.shift_sum(x, S, keepdims=True)}


def _build_torch() -> dict[str, Any]:
    """The question's tensors and precomputed tables (A_fast's kernel, A_faster's
    indices, A_pinv's overlap count alpha), as its code builds them."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(2023)
    x, mask = torch.rand(B, C, H, W), torch.rand(1, 1, H, W)
    kernel = torch.zeros(1, C, 1, (C - 1) * S + 1)
    for i in range(C):
        kernel[:, C - i - 1, :, i * S] = 1
    rows, cols = torch.arange(H).view(1, H, 1), torch.arange(W)
    indices = cols + torch.arange(C).view(C, 1, 1) * S + rows * WO
    alpha = torch.zeros(B, 1, 1, WO)
    for i in range(C):
        alpha[..., i * S : i * S + W] += 1
    y = portops.shift_sum(x, S, mask=mask[0, 0], keepdims=True)
    indices = indices.view(1, C * H * W).expand(B, C * H * W)
    return {"x": x, "mask": mask, "kernel": kernel, "indices": indices, "alpha": alpha, "y": y}


def _build_torch_grad() -> dict[str, Any]:
    """The same, with x a leaf that requires grad (its own, as every build's x is new)."""
    d = _build_torch()
    d["x"].requires_grad_()
    return d


# Built once, for the comparisons beyond the headline ones (a headline comparison builds its
# own ``Inputs``, anew for each of its visits).
_numpy_data = functools.cache(_build_numpy)
_torch_data = functools.cache(_build_torch)


# ------------------------------------------------------------------ the question's methods


def seed_loop(torch: Any, x: Any, mask: Any = None) -> Any:
    """``A``: the slice-add loop (no multiply without a mask)."""
    z = x if mask is None else x * mask
    y = torch.zeros(B, 1, H, WO, device=x.device)
    for i in range(C):
        y[..., (i * S) : (i * S + W)] += z[:, (i) : (i + 1)]
    return y


def seed_conv2d(torch: Any, x: Any, mask: Any, kernel: Any) -> Any:
    """``A_fast``: a conv2d with a (C, 1, (C-1)*S+1) kernel of ones on the shifts."""
    z = x if mask is None else x * mask
    return torch.nn.functional.conv2d(z, kernel, padding=(0, (C - 1) * S))


def seed_scatter_add(torch: Any, x: Any, mask: Any, indices: Any) -> Any:
    """``A_faster``: ``scatter_add_`` to precomputed output indices."""
    y = torch.zeros(B, H * WO, device=x.device)
    y.scatter_add_(1, indices, (x if mask is None else x * mask).view(B, C * H * W))
    return y.view(B, 1, H, WO)


def seed_pinv(torch: Any, y: Any, mask: Any, alpha: Any) -> Any:
    """``A_pinv``: divide by the overlap count, concatenate the windows, divide by the
    mask (the question's approximation, exact only for an all-ones mask)."""
    z = y / alpha
    return torch.cat([z[..., (i * S) : (i * S + W)] for i in range(C)], dim=1) / mask


def seed_pinv_fast(torch: Any, y: Any, mask: Any, alpha: Any, kernel: Any) -> Any:
    """``A_pinv_fast``: the same through ``conv_transpose2d``."""
    z = torch.nn.functional.conv_transpose2d(y / alpha, kernel, padding=(0, (C - 1) * S))
    return z / mask


def window_cat(torch: Any, y: Any) -> Any:
    """The adjoint as the question's A_pinv computes it, without its divisions."""
    return torch.cat([y[..., (i * S) : (i * S + W)] for i in range(C)], dim=1)


def np_slice_add_loop(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """``A`` in NumPy."""
    z = x if mask is None else x * mask
    y = np.zeros((B, 1, H, WO), dtype=x.dtype)
    for i in range(C):
        y[..., i * S : i * S + W] += z[:, i : i + 1]
    return y


# ------------------------------------------------------------------ headline: torch CPU


def _check(fn: Callable[[], Any], reference: Any) -> None:
    """Each method computes the result it is compared on (within float32 rounding)."""
    np.testing.assert_allclose(np.asarray(fn()).reshape(-1), np.asarray(reference).reshape(-1),
                               rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "mask"])
def test_torch_forward(compare: Any, masked: bool) -> None:
    """The forward; with the mask, the question's three methods as written."""
    torch, d = pytest.importorskip("torch"), Inputs(_build_torch)

    def m() -> Any:
        return d["mask"] if masked else None

    candidates = [
        Candidate(
            "portops", "default", lambda: portops.shift_sum(d["x"], S, mask=m(), keepdims=True)
        ),
        Candidate("slice-add loop", "baseline", lambda: seed_loop(torch, d["x"], m())),
        Candidate(
            "scatter_add_", "baseline", lambda: seed_scatter_add(torch, d["x"], m(), d["indices"])
        ),
        _copy(),
    ]
    if masked:  # one conv2d comparison: it takes seconds per call on a CPU
        conv = Candidate("conv2d", "baseline", lambda: seed_conv2d(torch, d["x"], m(), d["kernel"]))
        candidates.insert(3, conv)
    for c in candidates[1:3]:
        _check(c.fn, candidates[0].fn())
    compare(
        candidates,
        op="shift_sum",
        case=CASE,
        backend="torch",
        label="forward, mask" if masked else "forward",
        headline=True,
        nbytes=X_BYTES + Y_BYTES + MASK_BYTES * masked,
        inputs=d,
    )


def test_torch_adjoint(compare: Any) -> None:
    torch, d = pytest.importorskip("torch"), Inputs(_build_torch)

    def unfold() -> Any:  # every window as a view, then one copy
        return d["y"][:, 0].unfold(-1, W, S).movedim(2, 1).contiguous()

    candidates = [
        Candidate(
            "portops",
            "default",
            lambda: portops.shift_sum_adjoint(d["y"], S, channels=C, keepdims=True),
        ),
        Candidate("window cat", "baseline", lambda: window_cat(torch, d["y"])),
        Candidate("unfold + contiguous", "native", unfold),
        _copy(),
    ]
    for c in candidates[1:3]:
        _check(c.fn, candidates[0].fn())
    compare(
        candidates,
        op="shift_sum_adjoint",
        case=CASE,
        backend="torch",
        label="adjoint",
        headline=True,
        nbytes=X_BYTES + Y_BYTES,
        inputs=d,
    )


def test_torch_pinv(compare: Any) -> None:
    """The exact pseudo-inverse against the question's A_pinv and A_pinv_fast (which
    compute an approximation: the same bytes, another result)."""
    torch, d = pytest.importorskip("torch"), Inputs(_build_torch)
    compare(
        [
            Candidate(
                "portops",
                "default",
                lambda: portops.shift_sum_pinv(
                    d["y"], S, channels=C, mask=d["mask"][0, 0], keepdims=True
                ),
            ),
            Candidate(
                "A_pinv (cat)", "baseline", lambda: seed_pinv(torch, d["y"], d["mask"], d["alpha"])
            ),
            Candidate(
                "A_pinv_fast (conv_transpose2d)",
                "baseline",
                lambda: seed_pinv_fast(torch, d["y"], d["mask"], d["alpha"], d["kernel"]),
            ),
            _copy(),
        ],
        op="shift_sum_pinv",
        case=CASE,
        backend="torch",
        label="pinv, mask",
        headline=True,
        nbytes=X_BYTES + Y_BYTES + MASK_BYTES,
        inputs=d,
    )


def test_torch_forward_backward(compare: Any) -> None:
    """Forward and backward through autograd (the gradient of x), masked."""
    torch, d = pytest.importorskip("torch"), Inputs(_build_torch_grad)
    grad = torch.ones(B, 1, H, WO)

    def step(forward: Callable[[Any, Any], Any]) -> Callable[[], None]:
        def run() -> None:
            x = d["x"]
            x.grad = None
            forward(x, d["mask"]).backward(grad)

        return run

    compare(
        [
            Candidate(
                "portops",
                "default",
                step(lambda x, mask: portops.shift_sum(x, S, mask=mask[0, 0], keepdims=True)),
            ),
            Candidate(
                "slice-add loop", "baseline", step(lambda x, mask: seed_loop(torch, x, mask))
            ),
            Candidate(
                "scatter_add_",
                "baseline",
                step(lambda x, mask: seed_scatter_add(torch, x, mask, d["indices"])),
            ),
            _copy(),
        ],
        op="shift_sum",
        case=CASE,
        backend="torch",
        label="forward+backward, mask",
        headline=True,
        nbytes=2 * (X_BYTES + Y_BYTES + MASK_BYTES),
        inputs=d,
    )


# ------------------------------------------------------------------ headline: NumPy, Dask


def test_numpy_forward(compare: Any) -> None:
    d = Inputs(_build_numpy)
    compare(
        [
            Candidate("portops", "default", lambda: portops.shift_sum(d["x"], S, keepdims=True)),
            Candidate("slice-add loop", "baseline", lambda: np_slice_add_loop(d["x"])),
            _copy(),
        ],
        op="shift_sum",
        case=CASE,
        backend="numpy",
        label="forward",
        headline=True,
        nbytes=X_BYTES + Y_BYTES,
        inputs=d,
    )


def test_dask_forward(compare: Any) -> None:
    """A NumPy cube in Dask chunks of 4 images, computed on the threaded scheduler, against
    the question's loop on each chunk (``map_blocks``)."""
    da = pytest.importorskip("dask.array")
    chunks = (max(1, B // 4), C, H, W)
    d = Inputs(lambda: {"x": da.from_array(_build_numpy()["x"], chunks=chunks)})

    def loop_per_chunk(block: np.ndarray) -> np.ndarray:
        y = np.zeros((block.shape[0], 1, H, WO), dtype=block.dtype)
        for i in range(C):
            y[..., i * S : i * S + W] += block[:, i : i + 1]
        return y

    def mapped() -> Any:
        x = d["x"]
        out = x.map_blocks(loop_per_chunk, chunks=(x.chunks[0], 1, H, WO), dtype=x.dtype)
        return out.compute()

    compare(
        [
            Candidate("portops", "default", lambda: portops.shift_sum(d["x"], S).compute()),
            Candidate("map_blocks(slice-add loop)", "baseline", mapped),
        ],
        op="shift_sum",
        case=CASE + " chunks of 4",
        backend="dask",
        label="forward",
        headline=True,
        nbytes=X_BYTES + Y_BYTES,
        inputs=d,
    )


# ------------------------------------------------------------------ --full


def np_add_at(x: np.ndarray) -> np.ndarray:
    """A scatter with np.add.at to precomputed column indices."""
    y = np.zeros((B, H, WO), dtype=x.dtype)
    cols = np.arange(W)
    for i in range(C):
        np.add.at(y, (slice(None), slice(None), cols + i * S), x[:, i])
    return y


def _preferred(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """portops with one of its other implementations preferred."""

    def call() -> Any:
        with portops.prefer(shift_sum=name):
            return fn()

    return call


@pytest.mark.full
def test_numpy_forward_others(compare: Any) -> None:
    d = _numpy_data()
    x, mask = d["x"], d["mask"]
    forward = functools.partial(portops.shift_sum, x, S, mask=mask)
    compare(
        [
            Candidate("portops", "default", forward),
            Candidate("slice-add loop", "baseline", lambda: np_slice_add_loop(x, mask)),
            Candidate("np.add.at", "baseline", lambda: np_add_at(x * mask)),
            Candidate("portops numpy_add_at", "baseline", _preferred("numpy_add_at", forward)),
            _copy(),
        ],
        op="shift_sum",
        case=CASE,
        backend="numpy",
        label="forward, mask",
        nbytes=X_BYTES + Y_BYTES + MASK_BYTES,
        min_rounds=3,
    )


@pytest.mark.full
def test_numpy_adjoint_and_pinv(compare: Any) -> None:
    d = _numpy_data()
    y, mask = d["y"], d["mask"]
    compare(
        [
            Candidate("portops", "default", lambda: portops.shift_sum_adjoint(y, S, channels=C)),
            Candidate(
                "portops pinv",
                "baseline",
                lambda: portops.shift_sum_pinv(y, S, channels=C, mask=mask),
            ),
            Candidate(
                "window concat",
                "baseline",
                lambda: np.concatenate([y[..., i * S : i * S + W] for i in range(C)], axis=1),
            ),
            _copy(),
        ],
        op="shift_sum_adjoint",
        case=CASE,
        backend="numpy",
        label="adjoint",
        nbytes=X_BYTES + Y_BYTES,
    )


@pytest.mark.full
def test_torch_forward_others(compare: Any) -> None:
    """portops' default against its scatter implementation and the unmasked conv2d."""
    torch, d = pytest.importorskip("torch"), _torch_data()
    x, kernel = d["x"], d["kernel"]
    forward = functools.partial(portops.shift_sum, x, S, keepdims=True)
    compare(
        [
            Candidate("portops", "default", forward),
            Candidate(
                "portops torch_scatter_add", "baseline", _preferred("torch_scatter_add", forward)
            ),
            Candidate("conv2d", "baseline", lambda: seed_conv2d(torch, x, None, kernel)),
            _copy(),
        ],
        op="shift_sum",
        case=CASE,
        backend="torch",
        label="forward, implementations",
        nbytes=X_BYTES + Y_BYTES,
        min_rounds=3,
    )


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
def test_sweep(compare, backend, b, c, h, step, layout, masked):
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
        compare,
        lambda: portops.shift_sum(x, step, mask=mask, **axes),
        {"slice-add loop": lambda: sweep_loop(xp, x, mask, step, last)},
        op="shift_sum",
        backend=backend,
        case=f"B{b} C{c} {h}x{h} step{step} {layout}" + (" mask" if masked else ""),
        params={"B": b, "C": c, "H": h, "step": step, "layout": layout, "mask": masked},
        nbytes=4 * (b * c * h * h + b * h * wo + (h * h if masked else 0)),
    )
