"""Array inspection shared by every operation: library, device kind, namespace; cached
per array type, never importing a library the caller has not.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, NamedTuple, cast

import array_api_compat as compat
import numpy as np

from ._tracing import memo

# Built-in dispatch keys (other libraries: their top-level module's name, generic path)
NUMPY, TORCH, CUPY, JAX, DASK = "numpy", "torch", "cupy", "jax", "dask"
# Entry-point group through which other packages declare backends (see portops.extend).
ENTRY_POINT_GROUP = "portops.backends"


@dataclass(frozen=True)
class Backend:
    """What portops needs to know about one array library.

    Parameters
    ----------
    name, is_array, namespace, device, package, module, multi_device
        As :func:`portops.extend.register_backend` describes them. `name` is the
        dispatch key; :func:`portops.implementations` loads the `package` of every
        backend whose `module` is installed.
    """

    name: str
    is_array: Callable[[object], bool]
    namespace: Callable[[Any], Any] | None = None
    device: Callable[[Any], str] | None = None
    package: str | None = None
    module: str | None = None
    multi_device: bool = False

    def installed(self) -> bool:
        """Whether the library's module can be imported here (without importing it)."""
        name = self.module or self.name
        if name in sys.modules:
            return True
        try:
            return find_spec(name) is not None
        except (ImportError, ValueError):
            return False


_backend_lock = threading.RLock()
_backends: dict[str, Backend] = {}
_detection_order: tuple[Backend, ...] = ()  # registration order; replaced, never mutated
# Per library: its device function (None: always "cpu"); read on every call.
_device_of: dict[str, Callable[[Any], str] | None] = {}
_multi_device: frozenset[str] = frozenset()
_entry_points_loaded = [False]

_library_by_type: dict[type, str | None] = {}
_namespace_by_name: dict[str, Any] = {}


def add_backend(backend: Backend, *, replace: bool = False) -> None:
    """Register `backend` (see :func:`portops.extend.register_backend`)."""
    global _detection_order
    if not isinstance(backend, Backend):
        raise TypeError(f"backend must be a Backend, got {type(backend).__name__}")
    with _backend_lock:
        if backend.name in _backends and not replace:
            raise ValueError(
                f"a backend named {backend.name!r} is already registered; pass replace=True "
                "to replace it"
            )
        if backend.name in _backends:  # a replacement keeps its place in detection order
            order = [backend if b.name == backend.name else b for b in _detection_order]
        else:
            order = [*_detection_order, backend]
        _backends[backend.name] = backend
        _detection_order = tuple(order)
        _changed()


def remove_backend(name: str) -> Backend:
    """Unregister the backend `name` and return it; ValueError when there is none."""
    global _detection_order
    with _backend_lock:
        if name not in _backends:
            raise ValueError(f"no backend named {name!r}; registered: {', '.join(_backends)}")
        backend = _backends.pop(name)
        _detection_order = tuple(b for b in _detection_order if b.name != name)
        _changed()
        return backend


def _changed() -> None:
    """Rebuild the per-library tables and forget what was detected per type."""
    global _device_of, _multi_device
    # Rebound, not updated in place: a concurrent call sees the old table or the new one.
    _device_of = {b.name: b.device for b in _detection_order}
    _multi_device = frozenset(b.name for b in _detection_order if b.multi_device)
    _library_by_type.clear()
    _namespace_by_name.clear()


def get_backend(name: str) -> Backend | None:
    """The backend registered under `name`, or None."""
    return _backends.get(name)


def registered_backends() -> tuple[Backend, ...]:
    """Every registered backend, in the order their detection is tried."""
    return _detection_order


def load_entry_points() -> None:
    """Register the ``portops.backends`` entry points once; a failing one warns and is skipped."""
    if _entry_points_loaded[0]:
        return
    with _backend_lock:
        if _entry_points_loaded[0]:
            return
        _entry_points_loaded[0] = True
        from importlib import metadata  # only now: it costs milliseconds to import

        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                found = ep.load()
                if not isinstance(found, Backend) and callable(found):
                    found = found()
                if found is None:
                    continue
                if not isinstance(found, Backend):
                    raise TypeError(f"expected a portops.extend.Backend, got {found!r}")
                if found.name not in _backends:  # a registration made in code wins
                    add_backend(found)
            except Exception as exc:  # one broken plugin must not break dispatch
                warnings.warn(
                    f"portops: the {ENTRY_POINT_GROUP} entry point {ep.name!r} ({ep.value}) "
                    f"failed to load: {exc!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )


def _detect_library(x: object) -> str | None:
    found = next((b.name for b in _detection_order if b.is_array(x)), None)
    if found is None and not _entry_points_loaded[0]:  # other packages may declare it
        load_entry_points()
        found = next((b.name for b in _detection_order if b.is_array(x)), None)
    if found is None and compat.is_array_api_obj(x):
        return type(x).__module__.partition(".")[0]
    return found


def library_of(x: object) -> str | None:
    """Name of the array library `x` belongs to, or None when `x` is not an array."""
    t = type(x)
    try:
        return _library_by_type[t]
    except KeyError:
        pass
    lib = _detect_library(x)
    _library_by_type[t] = lib  # a single dict store: atomic, a race only recomputes
    return lib


@memo(None)
def _refusal(t: type) -> str | None:
    """Why arrays of NumPy subclass `t` are refused: every kernel would ignore a masked
    array's mask, and np.matrix stays 2-D through reductions (results would vary by path)."""
    names = {f"{c.__module__}.{c.__qualname__}" for c in t.__mro__}
    if names & {"numpy.ma.MaskedArray", "numpy.ma.core.MaskedArray"}:
        return (
            "a numpy.ma.MaskedArray, whose mask portops would ignore; pass its "
            ".filled(0) to count masked values as 0, or its .data for the values underneath"
        )
    if names & {"numpy.matrix", "numpy.matrixlib.defmatrix.matrix"}:
        return (
            "a numpy.matrix, which keeps two dimensions through reductions; pass np.asarray of it"
        )
    return None


def namespace_of(x: Any) -> Any:
    """The array-API-compatible namespace of `x` (cached per type)."""
    return _namespace_by_name[_namespace_name(x)]


def _namespace_name(x: Any) -> str:
    """A name for `x`'s type under which its namespace is kept: torch.compile keeps the
    name as a constant (it runs this eagerly while tracing), a module would not do."""
    t = type(x)
    name = f"{t.__module__}.{t.__qualname__}"
    if name not in _namespace_by_name:
        backend = _backends.get(library_of(x) or "")
        namespace = backend.namespace if backend is not None else None
        xp = compat.array_namespace(x) if namespace is None else namespace(x)
        _namespace_by_name[name] = xp  # one dict store: atomic, a race only recomputes
    return name


# Run eagerly while torch.compile traces: constants (see portops._machine.current).
library_of._dynamo_marked_constant = True  # type: ignore[attr-defined]
_namespace_name._dynamo_marked_constant = True  # type: ignore[attr-defined]


def device_of(x: Any) -> Any:
    """`x`'s device: torch's own attribute (compat.device tries every library: Dynamo warns)."""
    return x.device if library_of(x) == TORCH else compat.device(x)


def device_kind(x: Any, library: str) -> str:
    """ "cpu", "cuda" or another device type name; "cpu" for libraries without devices."""
    device = _device_of.get(library)
    return "cpu" if device is None else device(x)


class ArrayArgs(NamedTuple):
    """The common facts about the array arguments of one call."""

    library: str
    device: str
    xp: Any


def inspect_arrays(names: Sequence[str], arrays: Sequence[Any]) -> ArrayArgs:
    """Check that `arrays` (None: absent) share one library and device; Dask arrays may
    mix with in-memory arrays of their chunks' library, as Dask allows."""
    first_name = ""
    library: str | None = None
    first: Any = None
    with_dask = False
    for name, a in zip(names, arrays, strict=True):
        if a is None:
            continue
        lib = library_of(a)
        if lib is None:
            raise TypeError(
                f"{name} must be an array of an array-API library (NumPy, CuPy, PyTorch, "
                f"JAX, Dask, ...), got {type(a).__name__}"
            )
        if lib == NUMPY and type(a) is not np.ndarray and _refusal(type(a)) is not None:
            raise TypeError(f"{name} is {_refusal(type(a))}")
        if library is None:
            library, first, first_name = lib, a, name
        elif lib != library:
            if DASK in (lib, library):  # in-memory operands beside Dask arrays, as Dask allows
                with_dask = True
                continue
            raise TypeError(
                f"{first_name} and {name} come from two array libraries ({library} and {lib}); "
                "pass arrays of one library"
            )
    if library is None:
        raise TypeError(f"{names[0]} must be an array")
    if library == DASK or with_dask:
        return _inspect_with_dask(names, arrays)
    device = device_kind(first, library)
    if library in _multi_device:
        placed = [(n, device_of(a)) for n, a in zip(names, arrays, strict=True) if a is not None]
        # Traced JAX arrays report no device; only concrete placements can disagree.
        placed = [(n, d) for n, d in placed if d is not None]
        for n, d in placed[1:]:
            if d != placed[0][1]:
                raise ValueError(
                    f"{placed[0][0]} and {n} are on two devices ({placed[0][1]} and {d}); "
                    "move them to one device"
                )
    return ArrayArgs(library, device, namespace_of(first))


def chunk_library(x: Any) -> str:
    """The library of a Dask array's blocks (from its ``_meta``; NumPy when unknown)."""
    return library_of(getattr(x, "_meta", None)) or NUMPY


def _inspect_with_dask(names: Sequence[str], arrays: Sequence[Any]) -> ArrayArgs:
    """A Dask call: Dask arrays, with in-memory arrays of their blocks' library beside
    them (Dask combines those block by block); other mixtures fail here, not at compute."""
    named = [(n, a) for n, a in zip(names, arrays, strict=True) if a is not None]
    lazy = [(n, a) for n, a in named if library_of(a) == DASK]
    dask_name, dask_first = lazy[0]
    blocks = chunk_library(dask_first)
    for n, a in lazy[1:]:
        if chunk_library(a) != blocks:
            raise TypeError(
                f"{dask_name} and {n} are Dask arrays of {blocks} and {chunk_library(a)} "
                "chunks; pass Dask arrays whose chunks are of one library"
            )
    for n, a in named:
        lib = library_of(a)
        if lib != DASK and lib != blocks:
            raise TypeError(
                f"{dask_name} is a Dask array of {blocks} chunks and {n} is a {lib} array; "
                f"Dask combines them block by block, so {n} must be a {blocks} array (or "
                f"{dask_name}'s chunks {lib} arrays, e.g. with map_blocks({lib}.asarray))"
            )
    return ArrayArgs(DASK, device_kind(dask_first, DASK), namespace_of(dask_first))


def as_dask_operands(
    arrays: Sequence[Any], labels: Sequence[Sequence[Any]] | None = None
) -> tuple[Any, ...]:
    """`arrays` of a Dask call, in-memory ones wrapped lazily, chunked like the Dask
    operand's axis of the same label (`labels`; default: position from the end)."""
    backend = get_backend(DASK)
    if backend is None or backend.package is None:
        raise RuntimeError("no Dask backend is registered")
    package = importlib.import_module(backend.package)
    return cast("tuple[Any, ...]", package.operands.wrap(arrays, labels))


def inspect_operands(names: Sequence[str], arrays: Sequence[Any]) -> tuple[ArrayArgs, Any]:
    """:func:`inspect_arrays`, and the arrays: NumPy/CuPy ones beside a Dask one wrapped
    lazily (:func:`as_dask_operands`), as Dask itself combines them."""
    lib = inspect_arrays(names, arrays)
    return lib, (as_dask_operands(arrays) if lib.library == DASK else tuple(arrays))


def _dask_device(x: Any) -> str:
    return "cuda" if compat.is_cupy_array(getattr(x, "_meta", None)) else "cpu"


def _jax_device(x: Any) -> str:
    try:
        (dev,) = x.devices()
    except Exception:  # traced arrays have no concrete device
        return "cpu"
    return "cuda" if dev.platform == "gpu" else str(dev.platform)


def _is_array_api_strict_array(x: object) -> bool:
    t = type(x)
    return t.__module__ == "array_api_strict._array_object" and t.__name__ == "Array"


# The built-in backends, in detection order (no package: the generic implementations).
for _backend in (
    Backend(NUMPY, compat.is_numpy_array, package="portops._backends.numpy"),
    Backend(
        TORCH,
        compat.is_torch_array,
        device=lambda x: str(x.device.type),
        package="portops._backends.torch",
        multi_device=True,
    ),
    Backend(
        CUPY,
        compat.is_cupy_array,
        device=lambda x: "cuda",
        package="portops._backends.cupy",
        multi_device=True,
    ),
    Backend(JAX, compat.is_jax_array, device=_jax_device, multi_device=True),
    Backend(DASK, compat.is_dask_array, device=_dask_device, package="portops._backends.dask"),
    Backend("array_api_strict", _is_array_api_strict_array),
):
    add_backend(_backend)
del _backend
