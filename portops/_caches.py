"""The cache sizes of this machine, from which the kernels' block sizes and
crossovers are derived (rather than constants measured on one machine)."""

from __future__ import annotations

import functools
import os

__all__ = ["cache_bytes", "l2_bytes"]


@functools.cache
def cache_bytes(level: int, default: int) -> int:
    """The data (or unified) cache of one core at `level`, from sysfs (Linux) or
    sysconf; `default` where unknown."""
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
            return int(text.rstrip("KM")) * scale
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
