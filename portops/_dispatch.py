"""The registry: the highest-priority applicable implementation of an operation runs
for a (library, device), unless :func:`prefer` names one (public face: portops.extend)."""

from __future__ import annotations

import enum
import importlib
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _arrays, _plans
from ._inspect import Candidate, Explanation, ImplementationInfo, ImplementationTable, StrategyInfo
from ._strategy import Choice, Strategies, Strategy

if TYPE_CHECKING:
    from ._plans import PlanCache

__all__ = ["Call", "Implementation", "Priority", "explain", "implementations", "prefer"]


class Priority(enum.IntEnum):
    """Named priorities: among the implementations that apply, the highest runs (any
    int is accepted: ``Priority.SPECIALIZED + 5`` sits between these two levels)."""

    #: The generic array-API implementation: correct everywhere, chosen last.
    REFERENCE = -100
    #: A library's own function (``numpy.einsum``), beneath portops' specialisations.
    NATIVE = -10
    #: An alternative kept for comparison (``numpy_add_at``); reached by ``prefer``.
    BASELINE = 0
    #: The default specialisation of an operation for a library and device kind.
    SPECIALIZED = 10
    #: A specialisation for a narrower case (see ``applies``) that beats the default.
    OVERRIDE = 20


class Call(NamedTuple):
    """Normalised arguments of one call, as produced by an operation's ``prepare``."""

    library: str
    device: str
    args: Any  # the operation's Args record (ShiftSumArgs, VecdotArgs, ...)


@dataclass(frozen=True)
class Implementation:
    """One registered implementation of an operation."""

    op: str
    name: str
    func: Callable[..., Any]
    libraries: frozenset[str] | None  # None: any library (the generic path)
    devices: frozenset[str] | None  # None: any device kind
    priority: int
    applies: Callable[..., str | None] | None  # returns why it does not apply, or None
    summary: str
    planner: Callable[..., Any] | None = None  # args -> plan for the signature, or None
    strategies: Strategies | None = None  # None: one strategy, "default", calls `func`

    def choose(self, args: Any, forced: str | None = None) -> Choice:
        """The strategy for `args` (`forced`: a strategy name from prefer())."""
        if self.strategies is not None:
            return self.strategies.choose(args, forced)
        if forced not in (None, "default"):
            raise ValueError(f"{self.name} has no strategy {forced!r}; it has one: 'default'")
        only = Strategy("default", self.summary, lambda args: lambda *arrays: self.func(args))
        return Choice(only, "its only strategy")

    def reason_not_applicable(self, call: Call) -> str | None:
        libs = "any library" if self.libraries is None else "/".join(sorted(self.libraries))
        devs = "any device" if self.devices is None else "/".join(sorted(self.devices))
        if self.libraries is not None and call.library not in self.libraries:
            return f"registered for {libs} on {devs}, not {call.library} arrays"
        if self.devices is not None and call.device not in self.devices:
            return f"registered for {libs} on {devs}, not device {call.device!r}"
        return None if self.applies is None else self.applies(call.args)


class _Operation(NamedTuple):
    prepare: Callable[..., Call]
    arrays: Callable[[Any], tuple[Any, ...]]  # a record's arrays, as a plan takes them


_lock = threading.RLock()
_operations: dict[str, _Operation] = {}
_registry: dict[str, list[Implementation]] = {}
# (op, library, device) -> candidates by descending priority; rebuilt on registration.
_candidates: dict[tuple[str, str, str], tuple[Implementation, ...]] = {}
_generation = [0]  # bumped by every registration; stale candidate lists are not cached
_loaded_backends: set[str] = set()
_preferred: ContextVar[dict[str, str] | None] = ContextVar("portops_preferred", default=None)


def define_operation(
    name: str, prepare: Callable[..., Call], arrays: Callable[[Any], tuple[Any, ...]]
) -> None:
    """Declare operation `name`: `prepare` makes a :class:`Call`, `arrays` a record's arrays."""
    with _lock:
        _operations[name] = _Operation(prepare, arrays)
        _registry.setdefault(name, [])


def add(impl: Implementation, replace: bool = False) -> None:
    """Register `impl`; a replacement keeps the place of the one it replaces."""
    with _lock:
        impls = _registry.setdefault(impl.op, [])
        if all(i.name != impl.name for i in impls):
            _registry[impl.op] = [*impls, impl]
        elif replace:
            _registry[impl.op] = [impl if i.name == impl.name else i for i in impls]
        else:
            raise ValueError(
                f"an implementation of {impl.op} named {impl.name!r} is already registered; "
                "pass replace=True to replace it"
            )
        _changed()


def strategy_runner(op: str, strategies: Strategies) -> Callable[[Any], Any]:
    """The ``func`` of a strategies-defined implementation: the chosen plan, run once."""

    def run(args: Any) -> Any:
        """runs the strategy its rule chooses"""
        choice = strategies.choose(args, _forced_strategy(op))
        return choice.strategy.plan(args)(*_operations[op].arrays(args))

    return run


def unregister(op: str, name: str) -> Implementation:
    """Remove the implementation `name` of `op` and return it; ValueError if absent."""
    with _lock:
        impls = _registry.get(op, [])
        found = [i for i in impls if i.name == name]
        if not found:
            raise ValueError(
                f"no implementation of {op} named {name!r}; registered: "
                f"{', '.join(sorted(i.name for i in impls)) or 'none'}"
            )
        _registry[op] = [i for i in impls if i.name != name]
        _changed()
        return found[0]


def _changed() -> None:
    """After a registration: forget candidate lists and the plans built from them."""
    _generation[0] += 1
    _candidates.clear()
    _plans.clear()


def forget_backend(library: str) -> None:
    """After `library`'s backend was (re)registered: load its package again when seen."""
    with _lock:
        _loaded_backends.discard(library)
        _changed()


def _load_backend(library: str) -> None:
    """Import `library`'s backend package once (lock-free, so torch.compile traces it)."""
    if library in _loaded_backends:
        return
    backend = _arrays.get_backend(library)
    if backend is not None and backend.package is not None:
        importlib.import_module(backend.package)
    _loaded_backends.add(library)


# torch.compile runs this eagerly while tracing (assume_constant_result's mark).
_load_backend._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _candidates_for(op: str, library: str, device: str) -> tuple[Implementation, ...]:
    # Load first: registering clears the cache, which must not happen after a read.
    _load_backend(library)
    key = (op, library, device)
    found = _candidates.get(key)
    if found is not None:
        return found
    generation = _generation[0]
    impls = [
        i
        for i in _registry[op]
        if (i.libraries is None or library in i.libraries)
        and (i.devices is None or device in i.devices)
    ]
    found = tuple(sorted(impls, key=lambda i: -i.priority))
    if generation == _generation[0]:  # not invalidated by a concurrent registration
        _candidates[key] = found
    return found


def _preferred_name(op: str) -> str | None:
    """``"name"`` or ``"name/strategy"`` forced for `op` by :func:`prefer`, if any."""
    preferred = _preferred.get()
    return None if preferred is None else preferred.get(op)


def _forced_strategy(op: str) -> str | None:
    """The strategy forced for `op` by :func:`prefer` (``"name/strategy"``), if any."""
    return (_preferred_name(op) or "").partition("/")[2] or None


# Read eagerly while torch.compile traces: a graph keeps the choice made when compiled.
_preferred_name._dynamo_marked_constant = True  # type: ignore[attr-defined]


def select(op: str, call: Call) -> Implementation:
    """The implementation of `op` that runs for `call` (honouring :func:`prefer`)."""
    candidates = _candidates_for(op, call.library, call.device)
    preferred = _preferred_name(op)
    if preferred is not None:
        return _preferred_implementation(op, preferred, call)
    for impl in candidates:
        if impl.applies is None or impl.applies(call.args) is None:
            return impl
    raise LookupError(f"no implementation of {op} applies to {call.library} arrays")


def preferences_active() -> bool:
    """True inside a :func:`prefer` block (plans are then neither used nor kept)."""
    return _preferred.get() is not None


preferences_active._dynamo_marked_constant = True  # type: ignore[attr-defined]
# The same without a Python frame, for hot paths that have ruled out tracing first.
current_preferences = _preferred.get


def _preferred_implementation(op: str, preferred: str, call: Call) -> Implementation:
    name = preferred.partition("/")[0]  # "implementation/strategy": the strategy is checked later
    if all(i.name != name for i in _registry[op]):
        _load_installed_backends()
    impls = {i.name: i for i in _registry[op]}
    if name not in impls:
        raise ValueError(
            f"portops.prefer({op}={preferred!r}): no implementation {name!r}; "
            f"registered: {', '.join(sorted(impls))}"
        )
    impl = impls[name]
    reason = impl.reason_not_applicable(call)
    if reason is not None:
        raise ValueError(
            f"portops.prefer({op}={preferred!r}) does not apply to these arguments: {reason}"
        )
    return impl


def invoke_planned(
    op: str,
    plans: PlanCache,
    key: Hashable | None,
    arrays: tuple[Any, ...],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Validate, select and run a call of `op`, keeping its plan under `key` (None: none)."""
    operation = _operations[op]
    call = operation.prepare(*args, **kwargs)
    impl = select(op, call)
    keep = key is not None and not preferences_active()
    if impl.strategies is not None:
        plan = impl.strategies.choose(call.args, _forced_strategy(op)).strategy.plan(call.args)
        if keep:
            plans.put(key, plan)
            if impl.strategies.direct is not None and plans.maxsize > 0:
                plans.direct[type(arrays[0])] = impl.strategies.direct()
        return plan(*operation.arrays(call.args))
    if keep and impl.planner is not None:
        plan = impl.planner(call.args)
        if plan is not None:
            plans.put(key, plan)
            return plan(*arrays)
    return impl.func(call.args)


def _load_installed_backends() -> None:
    """Load the backend packages of every installed library (and entry points)."""
    _arrays.load_entry_points()
    for backend in _arrays.registered_backends():
        if backend.package is not None and backend.installed():
            with suppress(ImportError):  # library present but unusable here
                _load_backend(backend.name)


def check_operation(op: str) -> None:
    if op not in _operations:
        raise ValueError(f"unknown operation {op!r}; known: {', '.join(sorted(_operations))}")


def implementations(op: str) -> ImplementationTable:
    """List the implementations registered for operation `op`.

    Imports the backend specialisations of the array libraries that are installed.

    Parameters
    ----------
    op : str
        Operation name, for example ``"shift_sum"``.

    Returns
    -------
    ImplementationTable
        A sequence of rows, highest priority first, each with the attributes ``name``,
        ``libraries``, ``devices`` (``None`` meaning any), ``priority``, ``summary``
        and ``strategies`` (the names ``prefer(op="name/strategy")`` takes); printed,
        a table. ``.as_dicts()`` gives the rows as dicts.

    Examples
    --------
    >>> import portops
    >>> table = portops.implementations("vecdot")
    >>> table[-1].name, table[-1].libraries
    ('generic', None)
    >>> print(table)  # doctest: +ELLIPSIS
    implementations of vecdot:
      name...priority...libraries...devices...strategies...summary
      numpy...10...numpy...cpu...vecdot, einsum, ...
      generic...-100...any...any...default...pure array API product and sum ...
    """
    check_operation(op)
    _load_installed_backends()
    with _lock:
        impls = sorted(_registry[op], key=lambda i: (-i.priority, i.name))
    rows = [
        ImplementationInfo(
            i.name,
            None if i.libraries is None else tuple(sorted(i.libraries)),
            None if i.devices is None else tuple(sorted(i.devices)),
            i.priority,
            i.summary,
            tuple(i.strategies.names()) if i.strategies else ("default",),
        )
        for i in impls
    ]
    return ImplementationTable(op, rows)


def explain(op: str, *args: Any, **kwargs: Any) -> Explanation:
    """Say which implementation and strategy of `op` would run for these arguments, on
    how many threads, and why.

    Parameters
    ----------
    op : str
        Operation name, for example ``"shift_sum"``.
    *args, **kwargs
        The arguments exactly as they would be passed to the operation.

    Returns
    -------
    Explanation
        The arrays' ``library`` and ``device``, the ``chosen`` implementation and the
        ``candidates`` with their ``reason``; the ``strategy`` that will run, its
        ``threads`` and the rule that chose it (``reason``), every ``strategies``, and
        the torch features the call ``needs``. Printed, a readable report.

    Examples
    --------
    >>> import numpy as np, portops
    >>> report = portops.explain("vecdot", np.ones((2, 3)), np.ones(3))
    >>> report.chosen, report.strategy
    ('numpy', 'matvec')
    >>> print(report)  # doctest: +ELLIPSIS
    vecdot on numpy arrays (device cpu):
      -> numpy: ... [first that applies]
         generic: ... [applies, lower priority]
    strategy of numpy: matvec on 1 thread: ...
    """
    check_operation(op)
    call = _operations[op].prepare(*args, **kwargs)
    chosen = select(op, call)
    first = "forced by portops.prefer" if _preferred_name(op) else "first that applies"
    candidates = []
    for impl in _candidates_for(op, call.library, call.device):
        reason = None if impl is chosen else impl.reason_not_applicable(call)
        why = first if impl is chosen else reason or "applies, lower priority"
        candidates.append(Candidate(impl.name, impl.summary, impl is chosen, reason is None, why))
    choice = chosen.choose(call.args, _forced_strategy(op))
    needs = chosen.strategies.needs(call.args) if chosen.strategies else frozenset()
    pool = tuple(chosen.strategies) if chosen.strategies else (choice.strategy,)
    strategies = tuple(
        StrategyInfo(s.name, s.summary, s is choice.strategy, tuple(sorted(s.features)))
        for s in pool
    )
    return Explanation(
        op,
        call.library,
        call.device,
        tuple(candidates),
        strategy=choice.strategy.name,
        threads=choice.strategy.threads(call.args),
        reason=choice.reason,
        strategies=strategies,
        needs=tuple(sorted(needs)),
    )


@contextmanager
def without_preferences() -> Iterator[None]:
    """Dispatch by priority alone inside (Dask blocks: a preference names the outer call)."""
    token = _preferred.set(None)
    try:
        yield
    finally:
        _preferred.reset(token)


@contextmanager
def prefer(**choices: str) -> Iterator[None]:
    """Force named implementations within a ``with`` block (for the current thread or
    asyncio task).

    Parameters
    ----------
    **choices : str
        ``operation="implementation"`` (``prefer(shift_sum="numpy_add_at")``) or
        ``operation="implementation/strategy"`` (``prefer(vecdot="numpy/einsum")``;
        :func:`explain` lists them). A call the choice cannot handle raises
        ``ValueError`` instead of falling back.
    """
    for op, name in choices.items():
        check_operation(op)
        if not isinstance(name, str):
            raise TypeError(f"prefer({op}=...) expects an implementation name, got {name!r}")
    token = _preferred.set({**(_preferred.get() or {}), **choices})
    try:
        yield
    finally:
        _preferred.reset(token)
