"""NumPy array subclasses: those whose meaning portops would drop are refused by name.

A masked array's mask would be ignored (every kernel reads the data underneath) and
``np.matrix`` keeps two dimensions through reductions, so both raise ``TypeError``
naming the argument, in every operation, whether passed as the array or as the mask.
Other subclasses (``np.memmap``, a user's own) are arrays like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import portops

CALLS: dict[str, Callable[[Any], Any]] = {
    "shift_sum": lambda a: portops.shift_sum(a, 1, channel_axis=0),
    "shift_sum_adjoint": lambda a: portops.shift_sum_adjoint(a, 1, channels=2),
    "shift_sum_pinv": lambda a: portops.shift_sum_pinv(a, 1, channels=2),
    "shear": lambda a: portops.shear(a, 1, channel_axis=0),
    "unshear": lambda a: portops.unshear(a, 1, channel_axis=0),
    "vecdot": lambda a: portops.vecdot(a, a),
    "vecdot second": lambda a: portops.vecdot(np.ones(a.shape), a),
    "einsum": lambda a: portops.einsum("ij,ij->i", a, a),
    "einsum_path": lambda a: portops.einsum_path("ij,jk->ik", a, a.T),
    "shift_sum mask": lambda a: portops.shift_sum(np.ones((4, 4, 5)), 1, mask=a),
    "shift_sum_adjoint mask": lambda a: portops.shift_sum_adjoint(
        np.ones((4, 7)), 1, channels=3, mask=a
    ),
    "shear mask": lambda a: portops.shear(np.ones((4, 4, 5)), 1, mask=a),
}
NAMES = {"vecdot second": "x2", "einsum": "operand 0", "einsum_path": "operand 0"}


def _name(call: str) -> str:
    if call.endswith("mask"):
        return "mask"
    if call.startswith(("shift_sum_adjoint", "shift_sum_pinv", "unshear")):
        return "y"
    return NAMES.get(call, "x1" if call == "vecdot" else "x")


@pytest.mark.parametrize("call", CALLS)
def test_masked_arrays_are_refused_by_name(call):
    a = np.ma.masked_array(np.arange(20.0).reshape(4, 5), mask=np.eye(4, 5, dtype=bool))
    pattern = rf"^{_name(call)} is a numpy\.ma\.MaskedArray.*filled\(0\)"
    with pytest.raises(TypeError, match=pattern):
        CALLS[call](a)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("call", CALLS)
def test_matrices_are_refused_by_name(call):
    a = np.matrix(np.arange(20.0).reshape(4, 5))
    with pytest.raises(TypeError, match=rf"^{_name(call)} is a numpy\.matrix.*np\.asarray"):
        CALLS[call](a)


class _Tagged(np.ndarray):
    """A subclass that means nothing more than an ndarray."""


@pytest.mark.parametrize("call", [c for c in CALLS if c != "einsum_path"])
def test_other_subclasses_are_arrays(call, tmp_path):
    plain = np.arange(20.0).reshape(4, 5)
    expected = CALLS[call](plain)
    memmap = np.memmap(tmp_path / "a.bin", dtype=plain.dtype, mode="w+", shape=plain.shape)
    memmap[...] = plain
    for a in (plain.view(_Tagged), memmap):
        np.testing.assert_array_equal(np.asarray(CALLS[call](a)), np.asarray(expected))
