"""GPU promises of the shift_sum family: gradients, torch.compile, launch counts, streams,
64-bit indexing. Values on every case are checked by test_shift_sum.py (cupy and
torch_cuda backends); this module needs a CUDA device and skips without one, unless
``PORTOPS_TEST_BACKENDS`` names cupy / torch_cuda, in which case it fails.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import shift_sum_reference as ref
from backends import assert_compiled_matches_eager, require

import portops


@pytest.fixture
def torch():
    require("torch_cuda")
    return importlib.import_module("torch")


@pytest.fixture
def cupy():
    require("cupy")
    return importlib.import_module("cupy")


# --------------------------------------------------------------------------- torch CUDA


def test_torch_cuda_uses_the_triton_kernel(torch):
    x = torch.randn(2, 3, 4, 5, device="cuda")
    for op, arr in (("shift_sum", x), ("shift_sum_adjoint", portops.shift_sum(x, 2))):
        kw = {} if op == "shift_sum" else {"channels": 3}
        explained = portops.explain(op, arr, 2, **kw)
        assert (explained.chosen, explained.strategy) == ("torch", "triton"), op
    # Gradients keep the Triton launch (a Function around it); forward-mode AD does not.
    assert portops.explain("shift_sum", x.requires_grad_(), 2).strategy == "triton"


@pytest.mark.parametrize(("shape", "step", "axis", "cax", "mask_shape"), ref.GRADIENT_CASES)
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_torch_cuda_gradcheck(torch, shape, step, axis, cax, mask_shape, dtype):
    ref.check_gradients(torch, shape, step, axis, cax, mask_shape, dtype, "cuda")


@pytest.mark.parametrize("backend_name", ["aot_eager", "inductor"])
def test_torch_cuda_compile_fullgraph(torch, backend_name):
    def loss(x, mask):
        y = portops.shift_sum(x, 2, mask=mask)
        return (portops.shift_sum_pinv(y, 2, channels=3, mask=mask) - x).square().sum()

    assert_compiled_matches_eager(loss, backend_name, device="cuda")


def _clear_plans() -> None:
    import importlib

    module = importlib.import_module("portops._ops.shift_sum")
    for cache in (module.FORWARD_PLANS, module.ADJOINT_PLANS, module.PINV_PLANS):
        cache.clear()


def _torch_launches(monkeypatch, fn) -> list[str]:
    """Names of the Triton kernels a repeated call of `fn` launches.

    Counted at portops' launcher rather than by a profiler, so that the count also
    holds under compute-sanitizer (which hides kernels from the profiler).
    """
    from portops._backends.torch import _triton_shift_sum as kernels

    launched: list[str] = []
    real = kernels.Launcher.__call__

    def counting(self, *tensors):
        launched.append(self.kernel.__name__ if hasattr(self.kernel, "__name__") else "kernel")
        return real(self, *tensors)

    _clear_plans()
    fn()  # plans the call (an unmasked pseudo-inverse computes 1 / Phi here, once)
    monkeypatch.setattr(kernels.Launcher, "__call__", counting)
    fn()
    monkeypatch.setattr(kernels.Launcher, "__call__", real)
    return launched


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("step", [2, [0, 3, 1, 5]])
def test_torch_cuda_launch_counts(torch, monkeypatch, masked, step):
    x = torch.randn(2, 4, 16, 32, device="cuda")
    mask = torch.rand(16, 32, device="cuda") if masked else None
    y = portops.shift_sum(x, step, mask=mask)
    fwd = _torch_launches(monkeypatch, lambda: portops.shift_sum(x, step, mask=mask))
    adj = _torch_launches(
        monkeypatch, lambda: portops.shift_sum_adjoint(y, step, channels=4, mask=mask)
    )
    pinv = _torch_launches(
        monkeypatch, lambda: portops.shift_sum_pinv(y, step, channels=4, mask=mask)
    )
    assert len(fwd) == 1, fwd
    assert len(adj) == 1, adj
    assert len(pinv) == (2 if masked else 1), pinv


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_cuda_half_and_autocast(torch, dtype):
    dt = getattr(torch, dtype)
    x = torch.randn(2, 3, 4, 5, device="cuda").to(dt)
    got = portops.shift_sum(x, 1)
    assert got.dtype == dt and got.device.type == "cuda"
    want = ref.forward(x.float().cpu().numpy(), 1)
    np.testing.assert_allclose(got.float().cpu().numpy(), want, rtol=2e-2, atol=2e-2)
    w = torch.randn(2, 3, 4, 5, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=dt):
        h = torch.nn.functional.linear(w, torch.eye(5, device="cuda"))  # autocast to `dt`
        y = portops.shift_sum(h, 1)
    assert y.dtype == dt
    y.float().sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()


def test_torch_cuda_strided_and_channels_last(torch):
    base = torch.randn(3, 7, 6, 10, device="cuda", dtype=torch.float64)
    x = base.permute(0, 3, 1, 2)[..., ::2]  # (B, W, H, C) storage viewed as (B, C, H, W)
    mask = torch.rand(7, 3, device="cuda", dtype=torch.float64)
    got = portops.shift_sum(x, 2, mask=mask)
    want = ref.forward(x.cpu().numpy(), 2, mask=mask.cpu().numpy())
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-12)


@pytest.mark.slow
def test_torch_cuda_64bit_indexing(torch):
    """More than 2^31 elements: the kernels switch to 64-bit index arithmetic."""
    free, _ = torch.cuda.mem_get_info()
    if free < 6 * 2**30:
        pytest.skip("needs 6 GiB of free GPU memory")
    x = torch.ones(2, 2**15, 2**15, dtype=torch.int8, device="cuda")
    x[1, -1, -1] = 3
    y = portops.shift_sum(x, 1, channel_axis=0)
    assert y.shape == (2**15, 2**15 + 1)
    assert int(y[-1, -1]) == 3 and int(y[-1, -2]) == 2 and int(y[0, 0]) == 1
    assert int(y[5, 7]) == 2
    back = portops.shift_sum_adjoint(y, 1, channels=2, channel_axis=0)
    assert int(back[1, -1, -1]) == 3 and int(back[0, 0, 0]) == 1


# --------------------------------------------------------------------------- CuPy


def _cupy_launches(monkeypatch, fn) -> list[str]:
    """Names of the kernels a repeated call of `fn` launches (counted when planned)."""
    from portops._backends.cupy import shift_sum as backend

    launched: list[str] = []
    real = backend._launcher

    def counting(kernel, *args):
        function = real(kernel, *args)

        def call(*launch_args):
            launched.append(kernel)
            return function(*launch_args)

        return call

    monkeypatch.setattr(backend, "_launcher", counting)
    _clear_plans()
    fn()  # plans the call with the counting launchers
    launched.clear()
    fn()
    return launched


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("step", [2, [0, 3, 1, 5]])
def test_cupy_launch_counts(cupy, monkeypatch, masked, step):
    x = cupy.random.standard_normal((2, 4, 16, 32))
    mask = cupy.random.random((16, 32)) if masked else None
    y = portops.shift_sum(x, step, mask=mask)
    fwd = _cupy_launches(monkeypatch, lambda: portops.shift_sum(x, step, mask=mask))
    assert fwd == ["shift_sum_forward_rows"]
    adj = _cupy_launches(
        monkeypatch, lambda: portops.shift_sum_adjoint(y, step, channels=4, mask=mask)
    )
    assert adj == ["shift_sum_adjoint_rows"]
    pinv = _cupy_launches(
        monkeypatch, lambda: portops.shift_sum_pinv(y, step, channels=4, mask=mask)
    )
    want = (
        ["shift_sum_inverse_phi_rows", "shift_sum_adjoint_rows"]
        if masked
        else ["shift_sum_adjoint_rows"]
    )
    assert pinv == want


def test_cupy_respects_the_current_stream(cupy):
    x = cupy.random.standard_normal((4, 8, 64, 64)).astype(cupy.float32)
    mask = cupy.random.random((64, 64)).astype(cupy.float32)
    want = ref.forward(x.get(), 2, mask=mask.get())
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y = portops.shift_sum(x, 2, mask=mask)
        back = portops.shift_sum_adjoint(y, 2, channels=8, mask=mask)
    stream.synchronize()
    np.testing.assert_allclose(y.get(), want, rtol=2e-5, atol=2e-5)
    assert back.shape == x.shape


def test_cupy_strided_inputs_are_not_copied(cupy, monkeypatch):
    base = cupy.random.standard_normal((3, 10, 6, 7))
    x = base.transpose(0, 2, 3, 1)[..., ::2]  # (B, C, H, W) view of other storage
    mask = cupy.random.random((7, 5))
    monkeypatch.setattr(cupy, "ascontiguousarray", None)  # any copy would fail here
    got = portops.shift_sum(x, 2, mask=mask)
    np.testing.assert_allclose(got.get(), ref.forward(x.get(), 2, mask=mask.get()), rtol=1e-12)


def test_cupy_kernels_are_cached(cupy):
    from portops._backends.cupy import shift_sum as backend

    x = cupy.ones((2, 3, 4, 5), dtype=cupy.float32)
    portops.shift_sum(x, 1)
    before = backend._function.cache_info().misses
    portops.shift_sum(x, 1)
    assert backend._function.cache_info().misses == before


@pytest.mark.slow
def test_cupy_64bit_indexing(cupy):
    free, _ = cupy.cuda.runtime.memGetInfo()
    if free < 6 * 2**30:
        pytest.skip("needs 6 GiB of free GPU memory")
    x = cupy.ones((2, 2**15, 2**15), dtype=cupy.int8)
    x[1, -1, -1] = 3
    y = portops.shift_sum(x, 1, channel_axis=0)
    assert y.shape == (2**15, 2**15 + 1)
    assert int(y[-1, -1]) == 3 and int(y[-1, -2]) == 2 and int(y[5, 7]) == 2
    back = portops.shift_sum_adjoint(y, 1, channels=2, channel_axis=0)
    assert int(back[1, -1, -1]) == 3 and int(back[0, 0, 0]) == 1
