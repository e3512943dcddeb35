"""The machine profile (cores, caches, memory) strategy rules are fitted to, read
lazily from the OS; overridable per block or by the ``PORTOPS_MACHINE`` JSON file."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import platform
import subprocess
import sys
import threading
import warnings
from contextlib import suppress
from contextvars import ContextVar, Token
from typing import Any

__all__ = ["Machine", "current", "machine"]

ENV_MACHINE = "PORTOPS_MACHINE"
# Where nothing can be read (Windows, a sandbox without /sys): a modest laptop.
_DEFAULTS = {"l1": 32 << 10, "l2": 1 << 20, "l3": 8 << 20, "line": 64, "memory": 8 << 30}
_tokens = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Machine:
    """A description of the machine portops' choices are fitted to.

    Attributes
    ----------
    cores : int
        The cores this process may run on (its CPU affinity): the default thread count.
    l1, l2, l3 : int
        Bytes of one core's level-1 data and level-2 caches, of one L3 (0: none).
    l3_shared_by : int
        How many cores share one level-3 cache.
    line, memory : int
        Bytes of a cache line, of physical memory.
    cpu : str
        The processor's model name, where known.
    gpu_sms : int or None
        Streaming multiprocessors of the GPU (None: read from the device).
    source : str
        Where the values came from: ``"sysfs"``, ``"sysctl"``, ``"sysconf"``,
        ``"defaults"``, plus ``"+file"`` / ``"+override"`` for overridden fields.

    Used as a context manager, a profile applies within the block: ``with
    portops.machine(cores=64): portops.explain(...)``.
    """

    cores: int
    l1: int
    l2: int
    l3: int
    l3_shared_by: int
    line: int
    memory: int
    cpu: str = "unknown"
    gpu_sms: int | None = None
    source: str = "defaults"
    # Identifies the profile in plan keys.
    token: int = dataclasses.field(
        default_factory=lambda: next(_tokens), init=False, compare=False, repr=False
    )
    _entered: list[Token[Machine | None]] = dataclasses.field(
        default_factory=list, init=False, compare=False, repr=False
    )

    @property
    def core_cache(self) -> int:
        """What one core's working set can fill: its L2, or its share of L3 if larger."""
        return max(self.l2, self.l3 // max(1, self.l3_shared_by))

    @property
    def cache(self) -> int:
        """What this process's cores cache together: their L2s, or their L3s if larger."""
        instances = -(-self.cores // max(1, self.l3_shared_by))
        return max(self.l3 * instances, self.l2 * self.cores)

    def replace(self, **fields: Any) -> Machine:
        """A copy with checked fields changed; new ``cores`` alone means one shared L3."""
        checked = _check_fields(fields)
        if "cores" in checked and "l3_shared_by" not in checked:
            checked = {**checked, "l3_shared_by": checked["cores"]}
        source = self.source if "+override" in self.source else self.source + "+override"
        return dataclasses.replace(self, **checked, source=source)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (the form ``PORTOPS_MACHINE``'s file takes)."""
        return {f.name: getattr(self, f.name) for f in _PUBLIC_FIELDS}

    def __str__(self) -> str:
        def size(n: int) -> str:
            return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"

        l3 = f"{size(self.l3)} L3 shared by {self.l3_shared_by}" if self.l3 else "no L3"
        gpu = "" if self.gpu_sms is None else f", GPU of {self.gpu_sms} SMs"
        return (
            f"{self.cpu}: {self.cores} cores, {size(self.l1)} L1d, {size(self.l2)} L2 per "
            f"core, {l3}, {self.line}-byte lines, {self.memory / (1 << 30):.1f} GiB memory"
            f"{gpu} (from {self.source})"
        )

    def __enter__(self) -> Machine:
        global overridden
        overridden = True  # from now on plan keys read the profile in force
        self._entered.append(_scoped.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _scoped.reset(self._entered.pop())


_PUBLIC_FIELDS = tuple(
    f for f in dataclasses.fields(Machine) if f.name not in ("token", "_entered", "source")
)


def _check_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` checked: known names, positive integers (caches may be 0), or raise."""
    known = {f.name for f in _PUBLIC_FIELDS}
    for name, value in fields.items():
        if name not in known:
            raise TypeError(
                f"machine() got an unknown field {name!r}; fields: {', '.join(sorted(known))}"
            )
        if name == "cpu" and not isinstance(value, str):
            raise TypeError(f"cpu must be a str, got {type(value).__name__}")
        if name == "cpu" or (name == "gpu_sms" and value is None):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
        low = 0 if name == "l3" else 1
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
    return fields


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _sysfs_cache() -> dict[str, int] | None:
    """L1d, L2, L3 sizes, L3 sharing and the line size of cpu0, from Linux's sysfs."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        indices = sorted(i for i in os.listdir(root) if i.startswith("index"))
    except OSError:
        return None
    found: dict[str, int] = {}
    for index in indices:
        path = f"{root}/{index}"
        try:
            if _read(f"{path}/type") == "Instruction":
                continue
            level, text = _read(f"{path}/level"), _read(f"{path}/size").upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            found[f"l{level}"] = int(text.rstrip("KMG")) * scale
            found["line"] = int(_read(f"{path}/coherency_line_size"))
            if level == "3":  # shared_cpu_list reads like "0-3,8-11"
                ranges = [p.partition("-") for p in _read(f"{path}/shared_cpu_list").split(",")]
                found["l3_shared_by"] = sum(int(b or a) - int(a) + 1 for a, _, b in ranges if a)
        except (OSError, ValueError):
            continue
    return found or None


def _sysctl(name: str) -> int | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
        return int(out.stdout.strip()) or None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _sysctl_cache() -> dict[str, int] | None:
    """The same from macOS's sysctl (performance cores' caches on Apple silicon)."""
    names = {
        "l1": ("hw.perflevel0.l1dcachesize", "hw.l1dcachesize"),
        "l2": ("hw.perflevel0.l2cachesize", "hw.l2cachesize"),
        "l3": ("hw.l3cachesize",),
        "line": ("hw.cachelinesize",),
        "memory": ("hw.memsize",),
    }
    found = {k: v for k, c in names.items() if (v := next(filter(None, map(_sysctl, c)), 0))}
    return {"l3": 0, **found} if "l2" in found else None


def _sysconf(name: str) -> int | None:
    try:
        return os.sysconf(name) if hasattr(os, "sysconf") else None
    except (ValueError, OSError):
        return None


def _sysconf_cache() -> dict[str, int] | None:
    names = {
        "l1": "SC_LEVEL1_DCACHE_SIZE",
        "l2": "SC_LEVEL2_CACHE_SIZE",
        "l3": "SC_LEVEL3_CACHE_SIZE",
        "line": "SC_LEVEL1_DCACHE_LINESIZE",
    }
    found = {k: v for k, name in names.items() if (v := _sysconf(name) or 0) > 0}
    return found or None


def _cpu_name() -> str:
    with suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "unknown"


def detect() -> Machine:
    """The profile of this machine, read from the operating system (no overrides)."""
    fields: dict[str, Any] = {"source": "defaults"}
    readers = {"sysfs": _sysfs_cache, "sysconf": _sysconf_cache}
    if sys.platform == "darwin":
        readers = {"sysctl": _sysctl_cache, **readers}
    for source, reader in readers.items():
        found = reader()
        if found and "l2" in found:
            fields.update(found, source=source)
            break
    pages, page = _sysconf("SC_PHYS_PAGES"), _sysconf("SC_PAGE_SIZE")
    if pages and page:
        fields["memory"] = pages * page
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    fields = {**_DEFAULTS, "l3_shared_by": 1, **fields}
    fields["l3_shared_by"] = max(1, fields["l3_shared_by"])
    return Machine(cores=max(1, cores), cpu=_cpu_name(), **fields)


_scoped: ContextVar[Machine | None] = ContextVar("portops_machine", default=None)
overridden = False  # whether a profile was ever set in a ``with`` block
_detected: list[Machine] = []
_lock = threading.Lock()


def _from_file(base: Machine) -> Machine:
    """`base` with ``PORTOPS_MACHINE``'s JSON fields; a bad file only warns."""
    path = os.environ.get(ENV_MACHINE, "").strip()
    if not path:
        return base
    try:
        with open(path) as f:
            fields = json.load(f)
        if not isinstance(fields, dict):
            raise TypeError("the file must hold a JSON object of fields")
        _check_fields(fields)
    except (OSError, ValueError, TypeError) as exc:
        warnings.warn(
            f"{ENV_MACHINE}={path!r} could not be used ({exc}); using the detected machine",
            RuntimeWarning,
            stacklevel=3,
        )
        return base
    return dataclasses.replace(base, **fields, source=base.source + "+file")


def _process_machine() -> Machine:
    if not _detected:
        with _lock:
            if not _detected:
                _detected.append(_from_file(detect()))
    return _detected[0]


def current() -> Machine:
    """The profile in force: the innermost ``with machine(...)``'s, else the process's."""
    return _scoped.get() or _process_machine()


def token() -> int:
    """Identifies the profile in force, for plan keys (cheap: one ContextVar read)."""
    scoped = _scoped.get()
    return 0 if scoped is None else scoped.token


# torch.compile runs these eagerly as constants (it cannot trace a ContextVar read).
current._dynamo_marked_constant = True  # type: ignore[attr-defined]
token._dynamo_marked_constant = True  # type: ignore[attr-defined]


def reset() -> None:
    """Forget the detected profile (read again at the next use): for tests."""
    with _lock:
        _detected.clear()


def machine(**fields: Any) -> Machine:
    """The machine profile portops fits its choices to, optionally overridden.

    Parameters
    ----------
    **fields
        Fields of :class:`Machine` to override; sizes in bytes.

    Returns
    -------
    Machine
        The profile in force, with `fields` replaced; printed, a one-line summary.
        As a context manager it applies within the block, for the current thread or
        task: calls (and :func:`portops.explain`) then choose as on that machine.

    Raises
    ------
    TypeError
        For an unknown field or a value of the wrong type.
    ValueError
        For a size or count below its minimum.

    Examples
    --------
    >>> import numpy as np, portops
    >>> portops.machine().cores >= 1
    True
    >>> with portops.machine(cores=64, l2=2 << 20, l3=64 << 20):
    ...     portops.get_num_threads()
    64
    """
    base = current()
    return base.replace(**fields) if fields else base
