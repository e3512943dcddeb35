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


def test_a_shared_cache_is_divided_among_the_cpus_that_share_it(tmp_path) -> None:
    for text, count in (("0-1\n", 2), ("0\n", 1), ("0-3,8-11\n", 8), ("5,7\n", 2)):
        (tmp_path / "shared_cpu_list").write_text(text)
        assert _caches._sharing(str(tmp_path)) == count


def test_a_cache_without_a_sharing_list_is_one_cpus(tmp_path) -> None:
    assert _caches._sharing(str(tmp_path / "missing")) == 1


def test_the_l3_share_is_at_most_the_whole_l3() -> None:
    assert 0 <= _caches.l3_share_bytes() <= _caches.cache_bytes(3, 0)


def test_the_last_level_holds_at_least_the_l3_and_the_cores_l2s() -> None:
    from portops._threads import available_cores

    assert _caches.llc_bytes() >= _caches.cache_bytes(3, 0)
    assert _caches.llc_bytes() >= _caches.l2_bytes() * available_cores()
