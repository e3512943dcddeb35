"""The machine's cache sizes, from which block sizes and crossovers are derived."""

from __future__ import annotations

from portops import _caches


def test_every_level_reports_a_positive_size() -> None:
    for level in (1, 2, 3):
        size = _caches.cache_bytes(level, 12345)
        assert isinstance(size, int) and size > 0


def test_an_unknown_level_falls_back_to_the_default() -> None:
    assert _caches.cache_bytes(9, 12345) == 12345


def test_l2_is_the_level_two_size() -> None:
    assert _caches.l2_bytes() == _caches.cache_bytes(2, 1 << 20)
