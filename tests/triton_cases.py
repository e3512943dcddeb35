"""Cases for the torch CUDA path's Triton kernels, run on CPU tensors by Triton's interpreter.

Run by ``test_triton_interpret.py`` in a subprocess with ``TRITON_INTERPRET=1`` (the
variable must be set before ``import triton``), so the interpreter never replaces the
compiled kernels in a process that also tests CUDA tensors. Also checks the
``portops::shift_sum_pinv`` op's default (composed) implementation and its autograd
formula on the CPU.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import shift_sum_reference as ref
from backends import tolerance
from test_shift_sum import CASES

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from portops._arrays import namespace_of  # noqa: E402
from portops._ops.shift_sum import _prepare_forward, _prepare_transposed  # noqa: E402


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    # The variable must be set before triton is imported (its own helpers are jitted).
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("run through test_triton_interpret.py (TRITON_INTERPRET=1)")
    from portops._backends.torch import _triton_shift_sum

    return _triton_shift_sum


@pytest.fixture(autouse=True)
def _launches_take_every_parameter(monkeypatch):
    """Each launch's tensors, scalars and constexprs are the kernel's parameters in order,
    as the compiled launcher of a GPU's fast path takes them."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from portops._backends.torch._triton_launch import Launcher

    real = Launcher.__call__

    def checked(self, *tensors):
        names = self.kernel.arg_names
        assert len(tensors) + len(self.tail) == len(names), names
        assert set(names[len(names) - len(self.tail) + self.n_scalars :]) <= set(self.constexprs)
        return real(self, *tensors)

    monkeypatch.setattr(Launcher, "__call__", checked)


def _run(kernels: ModuleType, kind: str, a: Any, general: bool = False) -> Any:
    """The row kernels' plan of `kind` where it covers `a` (unless `general`), or the
    general kernels'."""
    plan = getattr(kernels, f"plan_{kind}")
    args = (a.array, tuple(a.offsets), a.axis, a.channel_axis, a.mask)
    return plan(*args, general_kernel=general)(a.array, a.mask)


def _rand(shape: Any, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    a = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _t(a: np.ndarray | None) -> Any:
    return None if a is None else torch.from_numpy(a)


def _check(got: Any, want: np.ndarray, dtype: Any) -> None:
    g = got.detach().resolve_conj()
    g = (g.float() if g.dtype == torch.bfloat16 else g).numpy()
    assert g.shape == want.shape
    np.testing.assert_allclose(g, want, **tolerance(dtype))


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_the_triton_strategy_plan(kernels, shape, step, axis, cax, mask_shape, keepdims):
    """The plan a CUDA call runs (result shape, channel axis dropped or kept) and, with
    gradients, the Function around the same launch: x's gradient is the adjoint's."""
    from portops._backends.torch.shift_sum import _linear_plan

    kw = {"axis": axis, "channel_axis": cax}
    x = _rand(shape, "float64", 0)
    mask = None if mask_shape is None else _rand(mask_shape, "float64", 1)
    want = ref.forward(x, step, **kw, mask=mask, keepdims=keepdims)
    for grad in (False, True):
        xt = _t(x).clone().requires_grad_(grad)
        a = _prepare_forward(xt, step, **kw, mask=_t(mask), keepdims=keepdims).args
        got = _linear_plan(a, "triton", False)(xt, _t(mask))
        _check(got, want, want.dtype)
        if grad:
            g = _rand(want.shape, "float64", 2)
            got.backward(_t(g))
            adj = ref.adjoint(g, step, channels=shape[cax], **kw, mask=mask, keepdims=keepdims)
            _check(xt.grad, adj, adj.dtype)


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), CASES)
@pytest.mark.parametrize(
    ("dtype", "mask_dtype"),
    [("float64", "float64"), ("complex128", "complex128"), ("float64", "complex128")],
)
@pytest.mark.parametrize("general", [False, True], ids=["row", "general"])
def test_forward_adjoint_pinv(
    kernels, shape, step, axis, cax, mask_shape, dtype, mask_dtype, general
):
    kw = {"axis": axis, "channel_axis": cax}
    x = _rand(shape, dtype, 0)
    mask = None if mask_shape is None else _rand(mask_shape, mask_dtype, 1)
    a = _prepare_forward(_t(x), step, **kw, mask=_t(mask)).args
    got = _run(kernels, "forward", a, general)
    want = ref.forward(x, step, **kw, mask=mask, keepdims=True)
    _check(got, want, want.dtype)

    y = _rand(want.shape, dtype, 2)
    a = _prepare_transposed(
        _t(y), step, channels=shape[cax], **kw, mask=_t(mask), keepdims=True
    ).args
    if general:  # no general adjoint kernel: torch's windows copy runs such calls
        with pytest.raises(NotImplementedError):
            _run(kernels, "adjoint", a, general)
        return
    if np.iscomplexobj(y) or np.iscomplexobj(mask) or a.channel_axis > a.axis:
        for kind in ("adjoint", "pinv"):  # beyond the row kernels, as the forward's
            with pytest.raises(NotImplementedError):
                _run(kernels, kind, a)
        return
    got = _run(kernels, "adjoint", a)
    want_adj = ref.adjoint(y, step, channels=shape[cax], **kw, mask=mask, keepdims=True)
    _check(got, want_adj, want_adj.dtype)

    if mask is not None:  # the reference pinv: A^H (y / Phi) with the dense matrix
        mask = (np.abs(mask) > 0.3) * mask  # zeros in Phi are handled
        a = a._replace(mask=torch.from_numpy(mask).reshape(a.mask.shape))
    got = _run(kernels, "pinv", a)
    dense = ref.dense_matrix(shape, step, **kw, mask=mask)
    want_pinv = (np.linalg.pinv(dense) @ y.reshape(-1)).reshape(shape)
    _check(got, want_pinv, np.complex128 if np.iscomplexobj(got.numpy()) else np.float64)


@pytest.mark.parametrize(
    ("dtype", "mask_dtype"),
    [
        ("float32", "float32"),
        ("float16", "float16"),
        ("bfloat16", "float32"),
        ("complex64", "float32"),
        ("float32", "complex64"),
        ("int32", None),
        ("int64", "int64"),
    ],
)
@pytest.mark.parametrize("general", [False, True], ids=["row", "general"])
def test_dtypes(kernels, dtype, mask_dtype, general):
    shape, step = (2, 5, 4, 6), 2
    x = torch.from_numpy(_rand(shape, "float64" if dtype == "bfloat16" else dtype, 0))
    x = x.to(torch.bfloat16) if dtype == "bfloat16" else x
    mask = None if mask_dtype is None else torch.from_numpy(_rand((4, 6), mask_dtype, 1))
    a = _prepare_forward(x, step, mask=mask).args
    got = _run(kernels, "forward", a, general)
    want_dtype = x.dtype if mask is None else torch.result_type(x, mask)
    assert got.dtype == want_dtype
    xn = x.float().numpy() if dtype == "bfloat16" else x.numpy()
    want = ref.forward(xn, step, mask=None if mask is None else mask.numpy(), keepdims=True)
    np.testing.assert_allclose(
        (got.float() if dtype in ("bfloat16", "float16") else got).numpy(),
        want,
        **tolerance("float16" if "16" in dtype else want_dtype.__repr__().split(".")[-1]),
    )


def test_half_accumulates_in_float32(kernels):
    x = torch.full((64, 1, 1), 0.0625, dtype=torch.float16)
    x[0] = 2048
    got = kernels.plan_forward(x, (0,) * 64, 2, 0, None)(x, None)
    assert got.dtype == torch.float16 and float(got.reshape(-1)[0]) == 2052.0


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels-last", "negative"])
def test_strided_inputs(kernels, layout):
    base = torch.from_numpy(_rand((3, 6, 7, 10), "float64", 0))
    mask = torch.from_numpy(_rand((7, 5), "float64", 1))
    if layout == "transposed":  # (B, C, H, W) viewed from (B, H, C, W) storage
        x = base.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)[..., :5]
    elif layout == "sliced":
        x = base[:, :, :, ::2]
    elif layout == "channels-last":
        x = base.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)[..., :5]
    else:
        x = base.flip(-1)[..., :5]
    assert not x.is_contiguous()
    offsets = [0, 1, 3, 4, 6, 9]
    a = _prepare_forward(x, offsets, mask=mask).args
    got = _run(kernels, "forward", a)
    want = ref.forward(x.numpy(), offsets, mask=mask.numpy(), keepdims=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    rows = (want.shape[0], 1, 2 * want.shape[2], want.shape[3])
    y = torch.from_numpy(_rand(rows, "float64", 3))[:, :, ::2]  # strided y
    a = _prepare_transposed(y, offsets, mask=mask, keepdims=True).args
    got = _run(kernels, "adjoint", a)
    want = ref.adjoint(y.numpy(), offsets, mask=mask.numpy(), keepdims=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_layout_beyond_the_kernels_is_reported(kernels):
    # A mask broadcast along alternate outer dims leaves 4 outer dims unmerged.
    x = torch.zeros(2, 3, 2, 3, 2, 5)
    mask = torch.ones(2, 1, 2, 1, 2, 5)
    a = _prepare_forward(x, 1, channel_axis=-2, mask=mask).args
    with pytest.raises(NotImplementedError):
        _run(kernels, "forward", a)


@pytest.mark.parametrize(
    ("s1", "s2", "axis", "planned"),
    [
        ((7, 5), (7, 5), -1, True),
        ((3, 3000), (3000,), -1, True),
        ((64, 5000), (64, 5000), -1, True),
        ((1000, 3), (1000, 3), -1, True),
        ((4, 1, 6), (5, 6), -1, False),  # broadcast rows that do not merge: native
        ((6, 4), (6, 4), -2, True),  # strided contracted axis
        ((2, 3, 4), (2, 3, 4), -2, False),  # batch dims that do not merge: native
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_vecdot_rows_plan(kernels, monkeypatch, s1, s2, axis, planned, dtype):
    """The torch CUDA vecdot's Triton plan, on CPU tensors (the interpreter)."""
    from portops._backends.torch import vecdot_cuda
    from portops._ops.vecdot import VecdotArgs

    monkeypatch.setattr(vecdot_cuda, "_sms", lambda device: 132)
    x1 = torch.from_numpy(_rand(s1, dtype, 0))
    x2 = torch.from_numpy(_rand(s2, dtype, 1))
    a = VecdotArgs.make(x1, x2, axis, False, namespace_of(x1))
    run = vecdot_cuda._triton_plan(a)
    want = np.sum(x1.double().numpy() * x2.double().numpy(), axis=axis)
    native = vecdot_cuda.STRATEGIES.by_name["native"].plan(a)
    got = native(x1, x2) if run is None else run(x1, x2)
    assert got.dtype == x1.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.double().numpy(), want, **tolerance(dtype))
    assert (run is not None) == planned


def test_vecdot_unsigned_native():
    from portops._backends.torch import vecdot_cuda
    from portops._ops.vecdot import VecdotArgs

    for dtype in ("uint16", "uint32", "uint64"):
        a = np.arange(12, dtype=dtype).reshape(3, 4) * np.array(2**13, dtype=dtype)
        t = torch.from_numpy(a)
        args = VecdotArgs.make(t, t, -1, False, namespace_of(t))
        got = vecdot_cuda.STRATEGIES.by_name["native"].plan(args)(t, t)
        want = np.sum(a * a, axis=-1, dtype=dtype)
        assert got.dtype == getattr(torch, dtype)
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize(("shape", "axis"), [((3, 6, 5), -1), ((6, 4), -2)])
def test_vecdot_rows_plan_keepdims(kernels, monkeypatch, shape, axis):
    from portops._backends.torch import vecdot_cuda
    from portops._ops.vecdot import VecdotArgs

    monkeypatch.setattr(vecdot_cuda, "_sms", lambda device: 132)
    x1 = torch.from_numpy(_rand(shape, "float32", 0))
    x2 = torch.from_numpy(_rand(shape, "float32", 1))
    run = vecdot_cuda._triton_plan(VecdotArgs.make(x1, x2, axis, True, namespace_of(x1)))
    want = np.sum(x1.double().numpy() * x2.double().numpy(), axis=axis, keepdims=True)
    got = run(x1, x2)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.double().numpy(), want, **tolerance("float32"))
