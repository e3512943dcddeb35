"""The tuning tables: every constant that decides speed, in one place per backend.

A strategy's rule (see :mod:`portops._strategy`) is written in terms of the machine
profile (:func:`portops.machine`: cores, cache sizes) and of the parameters here. Each
parameter says why it has its value and on which machine that was measured, so that a
reader can judge whether it holds on theirs; :func:`portops.tune` measures the ones
that have a measurement on the user's machine and saves them, and they are loaded
from then on (the defaults need no measurement).

The tables themselves are in :mod:`portops._tables` (plain data, importable without any
array library); this module holds the machinery.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _machine

__all__ = ["Param", "Table", "generation", "load", "tables", "tune"]

ENV_TUNING = "PORTOPS_TUNING"


@dataclass(frozen=True)
class Param:
    """One named constant of a tuning table.

    ``measure``, when set, is ``"module:function"``: a function of no arguments that
    returns the value measured on this machine (imported only by :func:`tune`).
    """

    name: str
    default: int | float
    unit: str
    reason: str
    measured_on: str
    measure: str | None = None


class Table(Mapping[str, Any]):
    """One backend's parameters: ``table["name"]`` is the value in force (measured by
    :func:`tune` on this machine when it was, else the default)."""

    def __init__(self, backend: str, params: list[Param]) -> None:
        self.backend = backend
        self.params = {p.name: p for p in params}
        if len(self.params) != len(params):
            raise ValueError(f"tuning table {backend!r} names a parameter twice")

    def __getitem__(self, name: str) -> Any:
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


_tables: dict[str, Table] = {}
_tuned: dict[str, int | float] = {}  # "backend.name" -> value measured on this machine
_generation = [0]  # bumped when tuned values change: plans made before are dropped
_listeners: list[Callable[[], None]] = []
_lock = threading.Lock()
_loaded = [False]


def register(table: Table) -> Table:
    """Add `table` (one per backend) and return it."""
    _tables[table.backend] = table
    return table


class Tables(dict[str, Table]):
    """The tuning tables by backend; printed, every parameter with its reason."""

    def __str__(self) -> str:
        return "\n".join(str(t) for t in self.values())

    __repr__ = __str__


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


def generation() -> int:
    """Changes whenever tuned values do (a plan key part)."""
    return _generation[0]


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` whenever tuned values change (the plan caches clear themselves)."""
    _listeners.append(listener)


def _changed() -> None:
    _generation[0] += 1
    for listener in list(_listeners):
        listener()


def default_path() -> Path:
    """``PORTOPS_TUNING`` if set, else ``portops/tuning.json`` in the user's cache folder."""
    override = os.environ.get(ENV_TUNING, "").strip()
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    return Path(base).expanduser() / "portops" / "tuning.json"


def _machine_id() -> dict[str, Any]:
    m = _machine.current()
    return {"cpu": m.cpu, "cores": m.cores, "l1": m.l1, "l2": m.l2, "l3": m.l3}


def load(path: str | os.PathLike[str] | None = None, *, force: bool = False) -> bool:
    """Load measurements saved by :func:`tune` (once per process unless `force`).

    Only a file made on a machine of the same processor, core count and caches is
    used; another machine's file is ignored. A malformed file warns and is ignored.
    Returns whether values were loaded.
    """
    if _loaded[0] and not force:
        return bool(_tuned)
    with _lock:
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
        if not isinstance(values, dict):
            return False
        found = {
            k: v
            for k, v in values.items()
            if k in known and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        _tuned.clear()
        _tuned.update(found)
        _changed()
        return bool(found)


@contextmanager
def overridden(values: dict[str, int | float]) -> Iterator[None]:
    """Parameters (``"backend.name" -> value``) in force within a block, for tests and
    experiments; plans made before and within the block are dropped at each end."""
    load()
    with _lock:
        saved = dict(_tuned)
        _tuned.update(values)
        _changed()
    try:
        yield
    finally:
        with _lock:
            _tuned.clear()
            _tuned.update(saved)
            _changed()


def reset() -> None:
    """Forget tuned values: the defaults are in force (for tests)."""
    with _lock:
        _tuned.clear()
        _loaded[0] = True
        _changed()


def _measure(spec: str) -> int | float:
    from importlib import import_module

    module, _, name = spec.partition(":")
    fn = getattr(import_module(module), name)
    value: int | float = fn()
    return value


def tune(*, save: bool = True, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Measure the tunable parameters on this machine and use them from now on.

    Each measurement takes a few seconds at most; a parameter whose backend is not
    installed keeps its default. The values are saved (unless `save` is False) to
    `path`, by default ``PORTOPS_TUNING`` or ``~/.cache/portops/tuning.json``, and loaded
    by later processes on the same machine.

    Parameters
    ----------
    save : bool, optional
        Write the measurements to `path` (default True).
    path : str or path-like, optional
        Where to save them.

    Returns
    -------
    dict
        ``"backend.parameter" -> value`` for every parameter measured.
    """
    load()
    measured: dict[str, int | float] = {}
    for table in _tables.values():
        for p in table.params.values():
            if p.measure is None:
                continue
            try:
                measured[f"{table.backend}.{p.name}"] = _measure(p.measure)
            except ImportError:
                continue
    with _lock:
        _tuned.update(measured)
        _changed()
    if save:
        file = Path(path) if path is not None else default_path()
        file.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "machine": _machine_id(),
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
            "values": measured,
        }
        file.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    return dict(measured)


def tuned_values() -> dict[str, int | float]:
    """The values measured by :func:`tune` in force (for reports)."""
    load()
    return dict(_tuned)
