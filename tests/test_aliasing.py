"""No result is an input, or a view of one: on every backend whose arrays can be
written, with every implementation and strategy, writing to a result leaves the inputs
as they were, and writing to the inputs afterwards leaves the result as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from backends import Backend, strategies

import portops

# Calls where a result could most easily be an input: a single channel, a window the
# size of the input, a transpose, a diagonal, a single vector.
CALLS: dict[str, tuple[str, Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "forward one channel": ("shift_sum", lambda x: portops.shift_sum(x, 1), ((4, 1, 5, 6),)),
    "forward": ("shift_sum", lambda x: portops.shift_sum(x, 1, mask=None), ((2, 3, 5, 6),)),
    "adjoint one channel": (
        "shift_sum_adjoint",
        lambda y: portops.shift_sum_adjoint(y, 1, channels=1),
        ((4, 5, 6),),
    ),
    "adjoint whole row": (
        "shift_sum_adjoint",
        lambda y: portops.shift_sum_adjoint(y, 6, channels=2, axis=-1, channel_axis=0),
        ((1, 12),),
    ),
    "adjoint": (
        "shift_sum_adjoint",
        lambda y: portops.shift_sum_adjoint(y, 2, channels=3),
        ((2, 5, 10),),
    ),
    "pinv": ("shift_sum_pinv", lambda y: portops.shift_sum_pinv(y, 1, channels=1), ((4, 5, 6),)),
    "shear zero step": ("shear", lambda x: portops.shear(x, 0), ((2, 3, 4, 5),)),
    "unshear zero step": ("unshear", lambda y: portops.unshear(y, 0), ((2, 3, 4, 5),)),
    "einsum identity": ("einsum", lambda a: portops.einsum("ij->ij", a), ((3, 4),)),
    "einsum transpose": ("einsum", lambda a: portops.einsum("ij->ji", a), ((3, 4),)),
    "einsum diagonal": ("einsum", lambda a: portops.einsum("ii->i", a), ((4, 4),)),
    "einsum ellipsis": ("einsum", lambda a: portops.einsum("...", a), ((3, 4),)),
    "einsum product": ("einsum", lambda a, b: portops.einsum("ij,jk->ik", a, b), ((3, 4), (4, 2))),
    "vecdot": ("vecdot", lambda a, b: portops.vecdot(a, b), ((3, 4), (3, 4))),
    "vecdot one vector": ("vecdot", lambda a, b: portops.vecdot(a, b), ((3, 4), (4,))),
    "vecdot keepdims": ("vecdot", lambda a, b: portops.vecdot(a, b, keepdims=True), ((3, 4), (4,))),
}


def _writable(backend: Backend) -> None:
    if backend.library in ("jax", "dask"):
        pytest.skip(f"{backend.library} arrays are not written in place")
    if backend.name == "numpy_readonly":
        pytest.skip("inputs that cannot be written")


def _fill(backend: Backend, a: Any, value: float) -> None:
    if backend.library == "torch":
        import torch

        with torch.no_grad():
            a.fill_(value)
    else:
        a[...] = value


def _names(op: str, backend: Backend) -> list[str | None]:
    """None (the default choice), then every implementation and strategy."""
    names: list[str | None] = [None]
    for impl, found in strategies(op, backend.library, backend.device).items():
        names.append(impl)
        names += [f"{impl}/{s}" for s in found if len(found) > 1]
    return names


@pytest.mark.parametrize("call", CALLS)
def test_results_never_alias_inputs(backend: Backend, call: str) -> None:
    _writable(backend)
    op, fn, shapes = CALLS[call]
    rng = np.random.default_rng(0)
    for name in _names(op, backend):
        values = [rng.uniform(1, 2, size=s) for s in shapes]
        inputs = [backend.asarray(v) for v in values]
        try:
            with portops.prefer(**{op: name}) if name else _nothing():
                result = fn(*inputs)
        except ValueError as exc:  # a strategy that does not apply to this call
            if "does not apply" in str(exc) or "does not keep" in str(exc):
                continue
            raise
        kept = np.array(backend.to_numpy(result), copy=True)
        _fill(backend, result, -7.0)  # the result written: the inputs stay
        for v, a in zip(values, inputs, strict=True):
            np.testing.assert_array_equal(backend.to_numpy(a), v, err_msg=f"{call} {name}")
        _fill(backend, result, 0.0)
        result_again = fn(*inputs)  # a fresh result, then the inputs written
        kept = np.array(backend.to_numpy(result_again), copy=True)
        for a in inputs:
            _fill(backend, a, 5.0)
        np.testing.assert_array_equal(backend.to_numpy(result_again), kept, err_msg=call)


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()
