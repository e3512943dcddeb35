"""The result-buffer cache never hands out memory that an array still uses."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from portops import _buffers

SHAPE = (2, 1024, 1024)  # 8 MiB of float32: above the caching threshold


def _recurring(shape: tuple[int, ...] = SHAPE, dtype: type = np.float32) -> None:
    """Ask for a size and drop it: the cache keeps sizes from their second request."""
    del_me = _buffers.empty(shape, dtype)
    del del_me


def test_small_results_are_plain_arrays():
    a = _buffers.empty((4, 5), np.float64)
    assert a.flags.owndata and a.shape == (4, 5)


def test_no_reuse_while_any_view_is_alive():
    _buffers.clear_cache()
    _recurring()
    a = _buffers.empty(SHAPE, np.float32)
    assert not a.flags.owndata
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
    _recurring()
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
        "print(_buffers.cache_info().held_bytes >> 20, all(k.flags.owndata for k in keep))\n"
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


def test_least_recently_used_free_buffer_is_dropped_first():
    previous = _buffers.set_cache_limit(3 * (8 << 20))
    try:
        _buffers.clear_cache()
        _recurring()
        _recurring((1, 1024, 1025))
        a, b, c = (_buffers.empty(SHAPE, np.float32) for _ in range(3))
        addresses = [a.ctypes.data, b.ctypes.data, c.ctypes.data]
        del a, c  # free, a used before c
        d = _buffers.empty((1, 1024, 1025), np.float32)  # 4 MiB more: one must go
        assert d.flags.owndata is False
        e = _buffers.empty(SHAPE, np.float32)
        # a (the least recently used) was dropped, c was kept and is reused; b is in use.
        assert e.ctypes.data == addresses[2]
        info = _buffers.cache_info()
        assert info.buffers == 3 and info.in_use == 3  # b, d, e
        assert info.held_bytes <= 3 * (8 << 20) and b.ctypes.data == addresses[1]
    finally:
        _buffers.set_cache_limit(previous)


def test_buffers_in_use_are_never_dropped():
    previous = _buffers.set_cache_limit(2 * (8 << 20))
    try:
        _buffers.clear_cache()
        live = [_buffers.empty(SHAPE, np.float32) for _ in range(4)]
        for k, a in enumerate(live):
            a[...] = k
        _buffers.set_cache_limit(0)  # lower than what is in use: nothing live is touched
        more = [_buffers.empty(SHAPE, np.float32) for _ in range(2)]
        for m in more:
            m[...] = -1
        assert all(np.all(a == k) for k, a in enumerate(live))
    finally:
        _buffers.set_cache_limit(previous)


def test_buffers_are_private_mappings():
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("mappings are read from /proc")
    _recurring()
    a = _buffers.empty(SHAPE, np.float32)
    assert not a.flags.owndata  # from the cache
    with open("/proc/self/maps") as f:
        start = a.ctypes.data
        for line in f:
            low, high = (int(v, 16) for v in line.split()[0].split("-"))
            if low <= start < high:
                assert line.split()[1].endswith("p"), line  # private, not shared
                break
        else:
            pytest.fail("the buffer's mapping was not found")


def test_sizes_are_kept_only_when_they_recur():
    _buffers.clear_cache()
    for k in range(20):  # distinct sizes, each asked for once: nothing is kept
        a = _buffers.empty((1, 1024, 1024 + 64 * k), np.float32)
        assert a.flags.owndata
        del a
    assert _buffers.cache_info().held_bytes == 0
    _recurring()
    for _ in range(3):  # a size that comes back is served by one kept buffer
        a = _buffers.empty(SHAPE, np.float32)
        assert not a.flags.owndata
        del a
    info = _buffers.cache_info()
    assert info.buffers == 1 and info.hits >= 2


def test_buffers_that_stop_recurring_are_released():
    _buffers.clear_cache()
    _recurring()
    kept = _buffers.empty(SHAPE, np.float32)
    assert not kept.flags.owndata
    del kept
    assert _buffers.cache_info().held_bytes == 8 << 20
    for k in range(_buffers.RECENT + 1):  # the loop moves on to other sizes
        del_me = _buffers.empty((1, 1024, 1024 + 64 * k), np.float32)
        del del_me
    assert _buffers.cache_info().held_bytes == 0


def test_default_bound_is_modest():
    code = "from portops import _buffers; print(_buffers.cache_info().max_bytes)"
    env = {k: v for k, v in os.environ.items() if k != "PORTOPS_BUFFER_CACHE_MB"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert int(out.stdout) == min(256 << 20, memory // 64)
