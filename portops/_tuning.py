"""The machinery of the tuning tables (the tables: :mod:`portops._tables`); :func:`tune`
measures what it can here and saves it for later processes.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

from . import _machine

__all__ = ["Param", "Table", "load", "tables", "tune"]

ENV_TUNING = "PORTOPS_TUNING"


@dataclass(frozen=True)
class Param:
    """One named constant; ``measure`` (``"module:function"``, optional) measures it."""

    name: str
    default: int | float
    unit: str
    measured_on: str
    reason: str
    measure: str | None = None


class Table(Mapping[str, Any]):
    """One backend's parameters: ``table[name]`` is the value in force (measured by
    :func:`tune` on this machine where it was, else the default)."""

    def __init__(self, backend: str, params: list[Param]) -> None:
        self.backend = backend
        self.params = {p.name: p for p in params}

    def __getitem__(self, name: str) -> Any:
        if not _loaded[0]:
            load()
        tuned = _tuned.get(f"{self.backend}.{name}")
        return self.params[name].default if tuned is None else tuned

    def __iter__(self) -> Iterator[str]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __str__(self) -> str:
        lines = [f"tuning table {self.backend}:"]
        for p in self.params.values():
            value = self[p.name]
            shown = f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
            tuned = " (tuned here)" if f"{self.backend}.{p.name}" in _tuned else ""
            lines.append(f"  {p.name} = {shown} {p.unit}{tuned}: {p.reason} [{p.measured_on}]")
        return "\n".join(lines)

    __repr__ = __str__


class Tables(dict[str, Table]):
    """The tuning tables by backend; printed, every parameter with its reason."""

    def __str__(self) -> str:
        return "\n".join(str(t) for t in self.values())

    __repr__ = __str__


_tables: dict[str, Table] = {}
_tuned: dict[str, int | float] = {}  # "backend.name" -> value measured on this machine
_generation = [0]  # bumped when tuned values change: a plan key part
_listeners: list[Callable[[], None]] = []
_lock = threading.RLock()
_loaded = [False]


def register(table: Table) -> Table:
    """Add `table` (one per backend) and return it."""
    _tables[table.backend] = table
    return table


def tables() -> Tables:
    """The tuning tables: every constant that decides which strategy runs, or how fast.

    Returns
    -------
    dict
        Backend name -> its table, a mapping of parameter name -> the value in force
        (measured on this machine by :func:`tune` where it was, else the default);
        ``table.params[name]`` holds the parameter's unit, the reason for its value and
        the machine that was measured on. Printed, every parameter with its reason.

    Examples
    --------
    >>> import portops
    >>> portops.tuning()["numpy"]["vecdot_short"] > 0
    True
    """
    load()
    return Tables(_tables)


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` whenever tuned values change (the plan caches clear then)."""
    _listeners.append(listener)


def _set(values: dict[str, int | float]) -> None:
    with _lock:
        _tuned.clear()
        _tuned.update(values)
        _generation[0] += 1
    for listener in _listeners:
        listener()


def default_path() -> Path:
    """``PORTOPS_TUNING`` if set, else ``portops/tuning.json`` in the user's cache folder."""
    if override := os.environ.get(ENV_TUNING, "").strip():
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    return Path(base).expanduser() / "portops" / "tuning.json"


def _machine_id() -> dict[str, Any]:
    m = _machine.current()
    return {"cpu": m.cpu, "cores": m.cores, "l1": m.l1, "l2": m.l2, "l3": m.l3}


def load(path: str | os.PathLike[str] | None = None, *, force: bool = False) -> bool:
    """Load the values :func:`tune` saved (once unless `force`); whether any were. A
    file of another machine is ignored; a malformed one warns (it tunes speed only)."""
    with _lock:
        if _loaded[0] and not force:
            return bool(_tuned)
        _loaded[0] = True
        file = Path(path) if path is not None else default_path()
        try:
            data = json.loads(file.read_text("utf-8"))
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            warnings.warn(f"portops: tuning file {file} ignored ({exc})", RuntimeWarning, 2)
            return False
        if not isinstance(data, dict) or data.get("machine") != _machine_id():
            return False
        values = data.get("values")
        known = {f"{t.backend}.{n}" for t in _tables.values() for n in t.params}
        found = {
            k: v
            for k, v in (values.items() if isinstance(values, dict) else ())
            if k in known and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        _set(found)
        return bool(found)


@contextmanager
def overridden(values: dict[str, int | float]) -> Iterator[None]:
    """Parameters (``"backend.name" -> value``) in force within a block (for tests)."""
    load()
    saved = dict(_tuned)
    _set({**saved, **values})
    try:
        yield
    finally:
        _set(saved)


def reset() -> None:
    """Forget tuned values: the defaults are in force (for tests)."""
    _loaded[0] = True
    _set({})


def tune(*, save: bool = True, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Measure the tunable parameters on this machine and use them from now on.

    Each measurement takes a few seconds at most; a parameter whose backend is not
    installed keeps its default.

    Parameters
    ----------
    save : bool, optional
        Write the measurements to `path` (default True), for later processes on the
        same machine to load.
    path : str or path-like, optional
        Where to save them; default ``PORTOPS_TUNING``, else
        ``~/.cache/portops/tuning.json``.

    Returns
    -------
    dict
        ``"backend.parameter" -> value`` for every parameter measured.
    """
    load()
    measured: dict[str, int | float] = {}
    for table in _tables.values():
        for p in table.params.values():
            if p.measure is not None:
                module, _, name = p.measure.partition(":")
                with suppress(ImportError):  # the backend is not installed
                    measured[f"{table.backend}.{p.name}"] = getattr(import_module(module), name)()
    _set({**_tuned, **measured})
    if save:
        file = Path(path) if path is not None else default_path()
        file.parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        data = {"machine": _machine_id(), "measured": stamp, "values": measured}
        file.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    return measured
