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
        (lambda: portops.shift_sum(X, {0, 2, 1}), TypeError, "step must be an integer .* set"),
        (lambda: portops.shear(X, {0, 0.5, 1}), TypeError, "step must be a number .* set"),
        (lambda: portops.shift_sum(X, 1, keepdims="no"), TypeError, "keepdims must be a bool"),
        (lambda: portops.vecdot(Y, Y, keepdims=None), TypeError, "keepdims must be a bool"),
        (
            lambda: portops.shift_sum_adjoint(np.ones(7), 1, channels=3),
            ValueError,
            r"channel_axis=-3 is out of range for the result x \(y's 1 dimensions and a ",
        ),
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


# -- one convention for every operation (portops._validate) -------------------------------

V = np.ones((2, 3))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda v: portops.shift_sum(X, 1, axis=v), "axis must be an integer"),
        (
            lambda v: portops.shift_sum(X, 1, channel_axis=v),
            "channel_axis must be an integer",
        ),
        (lambda v: portops.shift_sum_adjoint(Y, 1, channels=3, axis=v), "axis must be an integer"),
        (lambda v: portops.shear(X, 1, axis=v), "axis must be an integer"),
        (lambda v: portops.unshear(X, 0, channel_axis=v), "channel_axis must be an integer"),
        (lambda v: portops.vecdot(V, V, axis=v), "axis must be an integer"),
        (lambda v: portops.Dispersion(1, 3, axis=v), "axis must be an integer"),
        (lambda v: portops.shift_sum_adjoint(Y, 1, channels=v), "channels must be a positive "),
        (lambda v: portops.Dispersion(1, v), "channels must be a positive integer"),
        (lambda v: portops.shift_sum(X, [0, v, 2]), "step must contain integers"),
        (lambda v: portops.einsum("ij->i", V, memory_limit=v), "memory_limit must be a positive"),
    ],
)
@pytest.mark.parametrize(("value", "type_name"), [(True, "bool"), (1.0, "float"), ("1", "str")])
def test_integers_are_checked_alike_everywhere(call, message, value, type_name):
    """Every operation refuses bool (as np.sum(axis=True) does) and non-integers, with
    one message: "<name> must be <what>, got <type>"."""
    with pytest.raises(TypeError, match=f"^{message}.*, got {type_name}$"):
        call(value)


def test_integer_like_values_are_accepted_alike():
    expected = portops.shift_sum(X, 1, axis=-1, channel_axis=1)
    got = portops.shift_sum(X, np.int64(1), axis=np.int64(3), channel_axis=np.int8(1))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(portops.vecdot(V, V, axis=np.int64(1)), portops.vecdot(V, V))
    a = portops.Dispersion(1, np.int64(3), axis=np.int64(-1), channel_axis=np.int64(-3))
    assert a.channels == 3 and type(a.channels) is int and a.axis == -1


@pytest.mark.parametrize(
    "call",
    [
        lambda v: portops.shift_sum(X, 1, axis=v),
        lambda v: portops.shear(X, 1, axis=v),
        lambda v: portops.vecdot(V, V, axis=v),
    ],
)
def test_axes_out_of_range_name_the_axis_and_the_value(call):
    with pytest.raises(ValueError, match="axis=7 is out of range"):
        call(7)


@pytest.mark.parametrize(
    "call",
    [
        lambda v: portops.shift_sum(X, 1, keepdims=v),
        lambda v: portops.shift_sum_adjoint(np.ones((2, 1, 4, 7)), 1, channels=3, keepdims=v),
        lambda v: portops.vecdot(V, V, keepdims=v),
    ],
)
def test_flags_take_a_single_truth_value(call):
    """As NumPy's keepdims: np.True_ and 0/1 work, an array of several elements does not."""
    assert call(np.True_).shape == call(True).shape
    assert call(0).shape == call(False).shape
    with pytest.raises(TypeError, match=r"^keepdims must be a bool, got ndarray$"):
        call(np.array([True, False]))
    for value in ("no", None, 2):  # truthy or falsy, but not a flag
        with pytest.raises(TypeError, match=f"^keepdims must be a bool, got {value!r}$"):
            call(value)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: portops.shift_sum(X.astype(bool), 1), "x"),
        (lambda: portops.shear(X.astype(bool), 1), "x"),
        (lambda: portops.vecdot(V.astype(bool), V), "x1"),
        (lambda: portops.vecdot(V, V.astype("m8[s]")), "x2"),
    ],
)
def test_dtypes_are_checked_alike(call, name):
    with pytest.raises(
        TypeError, match=rf"^{name} must have a numeric dtype \(integer or floating\), got "
    ):
        call()


# -- each Args record describes its call's result ------------------------------------------


def _cases():
    m16 = np.ones((4, 5), dtype=np.float16)
    cases = [
        ("shift_sum", (X, 2), {}),
        ("shift_sum", (X.astype(np.float16), [0, 3, 1]), {"mask": m16, "keepdims": True}),
        ("shift_sum", (X.astype(np.int32), 1), {"axis": 0, "channel_axis": 2}),
        ("shift_sum_adjoint", (Y, 1), {"channels": 3, "mask": m16}),
        ("shift_sum_pinv", (Y.astype(np.float32), 1), {"channels": 2, "mask": m16[:, :1]}),
        ("shear", (X, 1.5), {}),
        ("unshear", (X.astype(np.float16), 1), {"mask": np.ones(3, np.float32)}),
        ("vecdot", (np.ones((2, 1, 3), np.float16), np.ones((4, 3), np.float16)), {}),
        ("vecdot", (np.ones((2, 3), np.int8), np.ones(3, np.float32)), {"keepdims": True}),
    ]
    return cases


@pytest.mark.parametrize(("op", "args", "kwargs"), _cases())
def test_args_record_carries_the_result_dtype_and_shape(op, args, kwargs):
    from portops import _dispatch

    record = _dispatch._operations[op].prepare(*args, **kwargs).args
    result = getattr(portops, op)(*args, **kwargs)
    assert record.dtype == result.dtype
    assert record.shape == result.shape
    if hasattr(record, "acc_dtype"):
        half = np.dtype(record.dtype) == np.float16
        assert np.dtype(record.acc_dtype) == (np.float32 if half else np.dtype(record.dtype))
