"""The cache sizes of this machine, from which the kernels' block sizes and
crossovers are derived (rather than constants measured on one machine)."""

from __future__ import annotations

import functools
import os

from ._threads import available_cores

__all__ = ["cache_bytes", "l2_bytes", "l3_share_bytes", "llc_bytes"]


def _sharing(path: str) -> int:
    """How many CPUs share the cache described at `path` (sysfs), at least 1."""
    try:
        with open(f"{path}/shared_cpu_list") as f:
            text = f.read().strip()
    except OSError:
        return 1
    count = 0
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return max(1, count)


@functools.cache
def cache_bytes(level: int, default: int, *, share: bool = False) -> int:
    """The data (or unified) cache at `level` seen by one core, from sysfs (Linux) or
    sysconf; `default` where unknown. With `share`, a cache shared by several CPUs
    (an L3, typically) is divided among them (sysfs only)."""
    try:
        for index in sorted(os.listdir("/sys/devices/system/cpu/cpu0/cache")):
            path = f"/sys/devices/system/cpu/cpu0/cache/{index}"
            if not index.startswith("index"):
                continue
            with open(f"{path}/level") as f_level, open(f"{path}/type") as f_type:
                if f_level.read().strip() != str(level) or "Instruction" in f_type.read():
                    continue
            with open(f"{path}/size") as f_size:
                text = f_size.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * scale // (_sharing(path) if share else 1)
    except (OSError, ValueError):
        pass
    name = "SC_LEVEL1_DCACHE_SIZE" if level == 1 else f"SC_LEVEL{level}_CACHE_SIZE"
    try:
        return max(0, os.sysconf(name)) or default
    except (ValueError, OSError, AttributeError):
        return default


def l2_bytes() -> int:
    """The L2 cache of one core; 1 MiB where unknown."""
    return cache_bytes(2, 1 << 20)


def l3_share_bytes() -> int:
    """One core's share of the L3 cache; 0 where there is none or it is unknown."""
    return cache_bytes(3, 0, share=True)


def llc_bytes() -> int:
    """All this process's cores cache: the L3 (shared), or the cores' L2s together
    where they hold more or there is no L3."""
    return max(cache_bytes(3, 0), l2_bytes() * available_cores())
