"""Per-signature call plans: validate and choose once, then only run
(``PORTOPS_PLAN_CACHE`` plans per operation, default 512, 0: none).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import numpy as np

from . import _machine, _tuning
from ._arrays import CUPY, NUMPY, TORCH, library_of
from ._tracing import tracing
from ._validate import setting

__all__ = ["PlanCache", "PlanStats", "key", "plan_cache_size", "stats"]

Plan = Callable[..., Any]


_MAX_PLANS: int = setting("PORTOPS_PLAN_CACHE", 512, "a non-negative integer")
_caches: dict[str, PlanCache] = {}


def plan_cache_size() -> int:
    """Plans kept per operation (``PORTOPS_PLAN_CACHE``; 0: no plans)."""
    return _MAX_PLANS


class PlanCache:
    """A bounded map from signature to plan, one per operation; reads take no lock."""

    def __init__(self, op: str, maxsize: int | None = None) -> None:
        self.op = op
        self.maxsize = _MAX_PLANS if maxsize is None else maxsize
        self._plans: dict[Hashable, Plan] = {}
        self.direct: dict[type, Plan] = {}  # per array type: see Strategies' `direct`
        self._lock = threading.Lock()
        self.made = 0
        _caches[op] = self

    def get(self, key: Hashable) -> Plan | None:
        return self._plans.get(key)

    def put(self, key: Hashable, plan: Plan) -> None:
        if self.maxsize <= 0:
            return
        with self._lock:
            while len(self._plans) >= self.maxsize:
                del self._plans[next(iter(self._plans))]  # the oldest
            self._plans[key] = plan
            self.made += 1

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self.direct.clear()

    def __len__(self) -> int:
        return len(self._plans)


class PlanStats(NamedTuple):
    """Plans held and made (since import) per operation; see :func:`stats`."""

    held: int
    made: int
    maxsize: int


def stats() -> dict[str, PlanStats]:
    """Per operation: plans held now, plans made since import, and the bound."""
    return {op: PlanStats(len(c), c.made, c.maxsize) for op, c in _caches.items()}


def clear() -> None:
    """Drop every plan (after a registration, or when tuned values change)."""
    for cache in list(_caches.values()):
        cache.clear()


_tuning.on_change(clear)


class _Reader(NamedTuple):
    """How a library's arrays enter a key, and its calls' ambient state (None: no plan)."""

    array: Callable[[Any], Hashable]
    state: Callable[[tuple[Any, ...]], Hashable | None]


def _no_state(arrays: tuple[Any, ...]) -> Hashable:
    return ()


def _torch_reader() -> _Reader:
    global _tensor, _torch_pair
    from . import _torch_state  # torch is imported: a tensor was passed

    _tensor, _torch_pair = _torch_state.Tensor, _torch_state.pair_key
    return _Reader(_torch_state.array_key, _torch_state.plan_state)


_UNSEEN: Any = object()
_reader_by_type: dict[type, _Reader | None] = {}


def _reader(t: type, a: Any) -> _Reader | None:
    lib = library_of(a)
    reader: _Reader | None = None
    if lib == NUMPY and t.__module__ == "numpy":
        reader = _Reader(lambda x: (x.dtype, x.shape, x.strides), _no_state)
    elif lib == TORCH:
        reader = _torch_reader()
    elif lib == CUPY:
        reader = _Reader(lambda x: (x.dtype, x.shape, x.strides, x.data.device_id), _no_state)
    _reader_by_type[t] = reader  # one dict store: atomic, a race only recomputes
    return reader


def ambient() -> Hashable:
    """The state every plan depends on: the tuned parameters' generation, and the
    machine profile in force where one was ever set in a ``with`` block."""
    if _machine.overridden:
        return (_tuning._generation[0], _machine.token())
    return _tuning._generation[0]


def key(params: Hashable, *arrays: Any) -> Hashable | None:
    """The signature of a call on `arrays` with hashable `params`, or None for no plan."""
    if _MAX_PLANS <= 0:
        return None
    first = arrays[0]
    t = type(first)
    if len(arrays) == 2:
        second = arrays[1]
        if t is _ndarray and (second is None or type(second) is t):
            if second is None:
                return (params, ambient(), first.dtype, first.shape, first.strides)
            return (
                params, ambient(), first.dtype, first.shape, first.strides,
                second.dtype, second.shape, second.strides,
            )  # fmt: skip
        if t is _tensor and (second is None or type(second) is t):
            return _torch_pair(params, first, second)
    if t is not _ndarray and tracing():  # no plans under torch.compile, no dict guard
        return None
    reader = _reader_by_type.get(t, _UNSEEN)
    if reader is _UNSEEN:  # a type's first call (torch's Tensor is learnt here)
        reader = _reader(t, first)
    if reader is None:
        return None
    state = reader.state(arrays)
    if state is None:
        return None
    parts: list[Any] = [t, params, state, ambient()]
    read = reader.array
    for a in arrays:
        if a is None:
            parts.append(None)
            continue
        other = type(a)
        if other is not t and _reader_by_type.get(other, _UNSEEN) is not reader:
            if other in _reader_by_type or _reader(other, a) is not reader:
                return None  # arrays of two libraries: the full path says why
        parts.append(read(a))
    return tuple(parts)


_ndarray = np.ndarray
_tensor: Any = None  # torch.Tensor, once a tensor has been seen (torch is imported then)
# pair_key, set with _tensor; a name from the start, as torch.compile looks it up
_torch_pair: Callable[..., Hashable | None] = lambda *args: None  # noqa: E731


def step_key(v: Any, types: tuple[type, ...] = (int,)) -> Hashable | None:
    """`v` if exactly of one of `types`, ``("seq", *v)`` for a list/tuple of them, else
    None (no plan: the full path validates it). Bools are refused: ``True == 1`` as a key."""
    if type(v) in types:
        return v  # type: ignore[no-any-return]
    if type(v) in (list, tuple):
        for item in v:
            if type(item) not in types:
                return None
        return ("seq", *v)
    return None
