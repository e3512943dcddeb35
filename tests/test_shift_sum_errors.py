"""Bad input gets a TypeError/ValueError that names the argument."""

from __future__ import annotations

import numpy as np
import pytest

import portops

X = np.ones((2, 3, 4, 5))
Y = np.ones((2, 4, 7))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: portops.shift_sum(X, 1.5), TypeError, "step must be an integer"),
        (lambda: portops.shift_sum(X, True), TypeError, "step must be an integer"),
        (lambda: portops.shift_sum(X, "2"), TypeError, "step must be an integer"),
        (lambda: portops.shift_sum(X, [0, 1]), ValueError, "step has 2 offsets but there are 3"),
        (lambda: portops.shift_sum(X, [0, 1.0, 2]), TypeError, "step must contain integers"),
        (lambda: portops.shift_sum(X, []), ValueError, "step must contain at least one"),
        (lambda: portops.shift_sum(X, 1, axis=1), ValueError, "name the same axis"),
        (lambda: portops.shift_sum(X, 1, axis=4), ValueError, "axis=4 is out of range"),
        (lambda: portops.shift_sum(X, 1, channel_axis=-5), ValueError, "channel_axis=-5"),
        (lambda: portops.shift_sum(X, 1, axis=1.0), TypeError, "axis must be an integer"),
        (lambda: portops.shift_sum(X, 1, mask=np.ones((3, 5))), ValueError, "does not broadcast"),
        (lambda: portops.shift_sum(X, 1, mask=np.ones((1, 2, 3, 4, 5))), ValueError, "mask has 5"),
        (lambda: portops.shift_sum(X, 1, mask=[[1.0]]), TypeError, "mask must be an array"),
        (lambda: portops.shift_sum([[1.0]], 1), TypeError, "x must be an array"),
        (lambda: portops.shift_sum(np.float64(1.0), 1), ValueError, "x must have at least 2"),
        (lambda: portops.shift_sum(np.ones(3), 1), ValueError, "x must have at least 2"),
        (lambda: portops.shift_sum(X.astype(bool), 1), TypeError, "x must have a numeric"),
        (lambda: portops.shift_sum_adjoint(Y, 1), ValueError, "channels is required"),
        (lambda: portops.shift_sum_adjoint(Y, 1, channels=0), ValueError, "channels must be"),
        (lambda: portops.shift_sum_adjoint(Y, 1, channels=2.0), TypeError, "channels must be"),
        (lambda: portops.shift_sum_adjoint(Y, 4, channels=3), ValueError, "y is too narrow"),
        (lambda: portops.shift_sum_adjoint(Y, [0, 9]), ValueError, "y is too narrow"),
        (lambda: portops.shift_sum_adjoint(Y, 1, channels=3, keepdims=True), ValueError, "size 1"),
        (lambda: portops.shift_sum_adjoint(np.ones(()), 1, channels=2), ValueError, "y must have"),
        (lambda: portops.shift_sum_adjoint("y", 1, channels=2), TypeError, "y must be an array"),
        (lambda: portops.shift_sum_pinv(Y.astype(int), 1, channels=3), TypeError, "floating"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_arrays_from_two_libraries():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="x and mask come from two array libraries"):
        portops.shift_sum(X, 1, mask=torch.ones(4, 5))


def test_arrays_on_two_devices():
    torch = pytest.importorskip("torch")
    x = torch.ones(2, 3, 4, 5)
    mask = torch.ones(4, 5, device="meta")
    with pytest.raises(ValueError, match="two devices"):
        portops.shift_sum(x, 1, mask=mask)
