"""The result-buffer cache never hands out memory that an array still uses."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from portops import _buffers

SHAPE = (2, 1024, 1024)  # 8 MiB of float32: above the caching threshold


def test_small_results_are_plain_arrays():
    a = _buffers.empty((4, 5), np.float64)
    assert a.flags.owndata and a.shape == (4, 5)


def test_no_reuse_while_any_view_is_alive():
    a = _buffers.empty(SHAPE, np.float32)
    a[...] = 7
    address = a.ctypes.data
    view = a[1, :10]
    del a
    b = _buffers.empty(SHAPE, np.float32)
    assert b.ctypes.data != address
    b[...] = 0
    assert np.all(view == 7)  # the live view was not overwritten
    del view
    c = _buffers.empty(SHAPE, np.float32)
    d = _buffers.empty(SHAPE, np.float32)
    assert address in (c.ctypes.data, d.ctypes.data)  # freed buffers are reused


def test_no_reuse_while_a_torch_tensor_is_alive():
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(_buffers.empty(SHAPE, np.float32))
    t.fill_(3)
    tail = t[1:]
    address = t.data_ptr()
    del t
    others = [_buffers.empty(SHAPE, np.float32) for _ in range(3)]
    assert all(o.ctypes.data != address for o in others)
    assert torch.all(tail == 3)


def test_results_are_ordinary_writable_arrays():
    a = _buffers.empty(SHAPE, np.float64)
    assert a.flags.writeable and a.flags.c_contiguous and a.dtype == np.float64
    a[...] = 1.5
    assert float(a.sum()) == 1.5 * a.size


def test_cache_is_bounded_and_can_be_turned_off():
    code = (
        "import numpy as np\n"
        "from portops import _buffers\n"
        "keep = [_buffers.empty((8, 1024, 1024), np.float32) for _ in range(5)]\n"
        "print(_buffers.cached_bytes() >> 20, all(k.flags.owndata for k in keep))\n"
    )
    for limit, expected in (("64", "64 False"), ("0", "0 True")):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**__import__("os").environ, "PORTOPS_BUFFER_CACHE_MB": limit},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == expected
