"""Extending portops: new implementations of its operations, new array libraries.

An *implementation* is a function of the operation's validated-arguments record that
returns the result, registered for array libraries and device kinds at a priority: the
highest-priority one whose ``applies`` passes runs (:func:`portops.prefer` forces one).
The records:

- ``shift_sum``, ``shift_sum_adjoint``, ``shift_sum_pinv``: :class:`ShiftSumArgs`
- ``shear``, ``unshear``: :class:`ShearArgs`
- ``vecdot``: :class:`VecdotArgs`
- ``einsum``: :class:`EinsumArgs`

A *backend* tells portops how to recognise an array library's arrays, their namespace
and device kind, and which package holds its implementations (imported at the first
call with its arrays); without one, a library runs the generic implementations. A
package can declare one in the ``portops.backends`` entry-point group
(``[project.entry-points."portops.backends"] mylib = "mylib_portops:BACKEND"``, a
:class:`Backend` or a function returning one), loaded at the first unknown array type.

Examples
--------
A library whose arrays are ``MyArray``, with a faster ``shift_sum``:

>>> import portops.extend as pe
>>> class MyArray: ...
>>> backend = pe.register_backend("mylib", is_array=lambda x: isinstance(x, MyArray))
>>> @pe.register("shift_sum", "mylib_fast", libraries=["mylib"],
...              priority=pe.Priority.SPECIALIZED)
... def shift_sum(args: pe.ShiftSumArgs):
...     '''One pass over args.array.'''
...     ...
>>> pe.unregister("shift_sum", "mylib_fast")
>>> pe.unregister_backend("mylib")

Tests use the scoped forms, which undo the registration on exit:

>>> with pe.registered_backend("mylib", is_array=lambda x: isinstance(x, MyArray)):
...     pass
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

from . import _arrays, _dispatch
from ._arrays import ENTRY_POINT_GROUP, Backend
from ._dispatch import Priority
from ._ops.einsum import EinsumArgs
from ._ops.shear import ShearArgs
from ._ops.shift_sum import ShiftSumArgs
from ._ops.vecdot import VecdotArgs
from ._strategy import Strategies

__all__ = [
    "ENTRY_POINT_GROUP", "Backend", "EinsumArgs", "Priority", "ShearArgs", "ShiftSumArgs",
    "VecdotArgs", "backends", "register", "register_backend", "registered",
    "registered_backend", "unregister", "unregister_backend"
]  # fmt: skip

F = TypeVar("F", bound=Callable[..., Any])


@overload
def register(
    op: str,
    name: str,
    func: None = None,
    *,
    libraries: Iterable[str] | None,
    devices: Iterable[str] | None = None,
    priority: int,
    applies: Callable[[Any], str | None] | None = None,
    planner: Callable[[Any], Callable[..., Any] | None] | None = None,
    summary: str = "",
    replace: bool = False,
    strategies: Strategies | None = None,
) -> Callable[[F], F]: ...


@overload
def register(
    op: str,
    name: str,
    func: F,
    *,
    libraries: Iterable[str] | None,
    devices: Iterable[str] | None = None,
    priority: int,
    applies: Callable[[Any], str | None] | None = None,
    planner: Callable[[Any], Callable[..., Any] | None] | None = None,
    summary: str = "",
    replace: bool = False,
    strategies: Strategies | None = None,
) -> F: ...


def register(
    op: str,
    name: str,
    func: Callable[..., Any] | None = None,
    *,
    libraries: Iterable[str] | None,
    devices: Iterable[str] | None = None,
    priority: int,
    applies: Callable[[Any], str | None] | None = None,
    planner: Callable[[Any], Callable[..., Any] | None] | None = None,
    summary: str = "",
    replace: bool = False,
    strategies: Strategies | None = None,
) -> Any:
    """Register `func` as the implementation `name` of operation `op`.

    Called with `func` (or with `strategies`), registers it and returns it; without,
    returns a decorator.

    Parameters
    ----------
    op : str
        The operation, for example ``"shift_sum"`` (the module's description lists
        the records).
    name : str
        Unique per operation: what :func:`portops.explain` shows and
        :func:`portops.prefer` takes.
    func : callable, optional
        ``func(args) -> result``, `args` being the operation's record. It must not
        modify its inputs and must return an array of the inputs' library and device.
    libraries : iterable of str or None
        The array libraries (backend names, ``"numpy"``, ``"torch"``, ...) whose arrays
        it handles; None for every library (the generic implementations).
    devices : iterable of str, optional
        The device kinds it handles (``"cpu"``, ``"cuda"``, ...); default every kind.
    priority : int
        Where it stands among the implementations for the same library and device;
        one of :class:`Priority` or an int between them.
    applies : callable, optional
        ``applies(args) -> str | None``: None when `func` can run these arguments,
        else a short reason why not (shown by :func:`portops.explain`).
    planner : callable, optional
        ``planner(args) -> plan | None``: a function of the raw arrays that repeats
        the call for later calls with the same signature, skipping validation and
        dispatch (NumPy, torch and CuPy arrays of the shift_sum family and vecdot).
    summary : str, optional
        One line on how it works; by default the first line of `func`'s docstring.
    replace : bool, optional
        Replace an implementation of `op` already registered under `name` instead of
        raising ValueError.
    strategies : Strategies, optional
        Named ways to run a call and the rule picking one
        (:class:`portops._strategy.Strategies`), instead of `func` and `planner`.

    Returns
    -------
    callable
        `func`, or a decorator that registers the function it receives and returns it.

    Raises
    ------
    ValueError
        Unknown `op`, or `name` already registered for `op` and `replace` is false.
    TypeError
        An argument of the wrong type (names that are not strings, a non-int priority).
    """
    _dispatch.check_operation(op)
    libs = _load_packages(libraries)
    devs = _names("devices", devices)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int (see Priority), got {priority!r}")
    for arg, value in (("applies", applies), ("planner", planner)):
        if value is not None and not callable(value):
            raise TypeError(f"{arg} must be callable or None, got {type(value).__name__}")
    if strategies is not None:
        if func is not None or planner is not None:
            raise TypeError("register: give strategies, or func (and a planner), not both")
        func = _dispatch.strategy_runner(op, strategies)

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise TypeError(f"the implementation {name!r} must be callable, got {f!r}")
        doc = summary or (f.__doc__ or "").strip().split("\n")[0]
        impl = _dispatch.Implementation(
            op, name, f, libs, devs, int(priority), applies, doc, planner, strategies
        )
        _dispatch.add(impl, replace)
        return f

    return decorate if func is None else decorate(func)


def _names(arg: str, values: Iterable[str] | None) -> frozenset[str] | None:
    if values is None:
        return None
    if isinstance(values, str):  # "numpy" would otherwise become {"n", "u", ...}
        return frozenset((values,))
    names = frozenset(values)
    for v in names:
        if not isinstance(v, str):
            raise TypeError(f"{arg} must be names (str), got {v!r}")
    return names


def _load_packages(libraries: Iterable[str] | None) -> frozenset[str] | None:
    """Load the libraries' backend packages now, so name clashes and replacements hold."""
    libs = _names("libraries", libraries)
    for library in sorted(libs or ()):
        backend = _arrays.get_backend(library)
        if backend is not None and backend.package is not None and backend.installed():
            _dispatch._load_backend(library)
    return libs


def unregister(op: str, name: str) -> None:
    """Remove the implementation `name` of operation `op`.

    Plans of repeated calls are dropped, so the next call chooses again.

    Raises
    ------
    ValueError
        Unknown `op`, or no implementation of `op` named `name`.
    """
    _dispatch.check_operation(op)
    _dispatch.unregister(op, name)


@contextmanager
def registered(
    op: str,
    name: str,
    func: Callable[..., Any],
    *,
    libraries: Iterable[str] | None,
    devices: Iterable[str] | None = None,
    priority: int,
    applies: Callable[[Any], str | None] | None = None,
    planner: Callable[[Any], Callable[..., Any] | None] | None = None,
    summary: str = "",
    replace: bool = False,
) -> Iterator[Callable[..., Any]]:
    """:func:`register` for the duration of a ``with`` block (for tests).

    On exit the implementation is removed, and the one it replaced (``replace=True``)
    comes back. Yields `func`. The registry is shared by every thread.

    Examples
    --------
    >>> import numpy as np, portops, portops.extend as pe
    >>> def spy(args):
    ...     return np.zeros(1)
    >>> with pe.registered("vecdot", "spy", spy, libraries=["numpy"],
    ...                    priority=pe.Priority.OVERRIDE):
    ...     portops.vecdot(np.ones(3), np.ones(3))
    array([0.])
    >>> float(portops.vecdot(np.ones(3), np.ones(3)))
    3.0
    """
    _dispatch.check_operation(op)
    _load_packages(libraries)
    previous = {i.name: i for i in _dispatch._registry[op]}.get(name) if replace else None
    register(
        op,
        name,
        func,
        libraries=libraries,
        devices=devices,
        priority=priority,
        applies=applies,
        planner=planner,
        summary=summary,
        replace=replace,
    )
    try:
        yield func
    finally:
        if previous is None:
            _dispatch.unregister(op, name)
        else:
            _dispatch.add(previous, replace=True)


def register_backend(
    name: str | Backend,
    /,
    *,
    is_array: Callable[[object], bool] | None = None,
    namespace: Callable[[Any], Any] | None = None,
    device: Callable[[Any], str] | None = None,
    package: str | None = None,
    module: str | None = None,
    multi_device: bool = False,
    replace: bool = False,
) -> Backend:
    """Teach portops an array library: one call, then register its implementations.

    Parameters
    ----------
    name : str or Backend
        The library's name, the key its implementations are registered under (or a
        complete :class:`Backend`, with no other field given).
    is_array : callable
        ``is_array(x) -> bool``: whether `x` is one of its arrays, without importing
        the library. Tried after the backends registered before it; cached per type.
    namespace : callable, optional
        ``namespace(x)``: the array-API namespace of its arrays (default
        ``array_api_compat.array_namespace``, which calls ``x.__array_namespace__()``).
    device : callable, optional
        ``device(x) -> str``: the device kind of `x` (default ``"cpu"`` for every array).
    package : str, optional
        A module that registers the library's implementations when imported; portops
        imports it on the first call with one of its arrays.
    module : str, optional
        The library's top-level module (default `name`), to tell whether it is
        installed without importing it.
    multi_device : bool, optional
        Whether its arrays of one device kind can sit on different devices; the
        arrays of a call are then checked to share one.
    replace : bool, optional
        Replace a backend already registered under `name` instead of raising.

    Returns
    -------
    Backend
        The registered descriptor.

    Raises
    ------
    ValueError
        A backend named `name` is registered already and `replace` is false.
    TypeError
        `is_array` missing or not callable, or fields given beside a Backend.
    """
    if isinstance(name, Backend):
        given = (is_array, namespace, device, package, module)
        if any(v is not None for v in given) or multi_device:
            raise TypeError("register_backend(Backend(...)) takes no other fields")
        backend = name
    else:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str or a Backend, got {name!r}")
        if not callable(is_array):
            raise TypeError(f"is_array must be callable, got {is_array!r}")
        for arg, value in (("namespace", namespace), ("device", device)):
            if value is not None and not callable(value):
                raise TypeError(f"{arg} must be callable or None, got {value!r}")
        backend = Backend(name, is_array, namespace, device, package, module, multi_device)
    _arrays.add_backend(backend, replace=replace)
    _dispatch.forget_backend(backend.name)
    return backend


def unregister_backend(name: str) -> None:
    """Forget the backend `name`: its arrays are then handled as an unknown library's.

    The implementations registered for it stay registered (its package has been
    imported); :func:`unregister` removes them.

    Raises
    ------
    ValueError
        No backend named `name`.
    """
    _arrays.remove_backend(name)
    _dispatch.forget_backend(name)


@contextmanager
def registered_backend(
    name: str | Backend,
    /,
    *,
    is_array: Callable[[object], bool] | None = None,
    namespace: Callable[[Any], Any] | None = None,
    device: Callable[[Any], str] | None = None,
    package: str | None = None,
    module: str | None = None,
    multi_device: bool = False,
) -> Iterator[Backend]:
    """:func:`register_backend` for the duration of a ``with`` block (for tests).

    Yields the descriptor; on exit the backend is unregistered.
    """
    backend = register_backend(
        name,
        is_array=is_array,
        namespace=namespace,
        device=device,
        package=package,
        module=module,
        multi_device=multi_device,
    )
    try:
        yield backend
    finally:
        unregister_backend(backend.name)


def backends() -> tuple[Backend, ...]:
    """Every registered backend, in the order their ``is_array`` checks are tried.

    Backends declared through the ``portops.backends`` entry points are loaded first.
    """
    _arrays.load_entry_points()
    return _arrays.registered_backends()
