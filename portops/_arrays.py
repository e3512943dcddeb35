"""Array inspection shared by every operation: library, device kind, namespace.

Everything here is cached per array *type*, so the cost on a hot path is a dict
lookup. Nothing imports an array library that the caller has not imported already.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import array_api_compat as compat

# Library names used as dispatch keys. Anything else is handled by the generic path
# under the name of its top-level module (for example "array_api_strict").
NUMPY, TORCH, CUPY, JAX, DASK = "numpy", "torch", "cupy", "jax", "dask"

_library_by_type: dict[type, str] = {}
_namespace_by_type: dict[type, Any] = {}


def _detect_library(x: object) -> str | None:
    if compat.is_numpy_array(x):
        return NUMPY
    if compat.is_torch_array(x):
        return TORCH
    if compat.is_cupy_array(x):
        return CUPY
    if compat.is_jax_array(x):
        return JAX
    if compat.is_dask_array(x):
        return DASK
    if compat.is_array_api_obj(x):
        return type(x).__module__.partition(".")[0]
    return None


def library_of(x: object) -> str | None:
    """Name of the array library `x` belongs to, or None when `x` is not an array."""
    t = type(x)
    try:
        return _library_by_type[t]
    except KeyError:
        pass
    lib = _detect_library(x)
    if lib is not None:
        _library_by_type[t] = lib  # a single dict store: atomic, a race only recomputes
    return lib


def namespace_of(x: Any) -> Any:
    """The array-API-compatible namespace of `x` (cached per type)."""
    t = type(x)
    try:
        return _namespace_by_type[t]
    except KeyError:
        pass
    xp = compat.array_namespace(x)
    _namespace_by_type[t] = xp
    return xp


def device_kind(x: Any, library: str) -> str:
    """ "cpu", "cuda" or another device type name; "cpu" for libraries without devices."""
    if library == NUMPY:
        return "cpu"
    if library == TORCH:
        return str(x.device.type)
    if library == CUPY:
        return "cuda"
    if library == DASK:
        return "cuda" if compat.is_cupy_array(getattr(x, "_meta", None)) else "cpu"
    if library == JAX:
        try:
            (dev,) = x.devices()
        except Exception:  # traced arrays have no concrete device
            return "cpu"
        return "cuda" if dev.platform == "gpu" else str(dev.platform)
    return "cpu"


class ArrayArgs(NamedTuple):
    """The common facts about the array arguments of one call."""

    library: str
    device: str
    xp: Any


def inspect_arrays(names: Sequence[str], arrays: Sequence[Any]) -> ArrayArgs:
    """Check that `arrays` are arrays of one library on one device.

    `names` are the parameter names used in error messages; ``None`` entries of
    `arrays` are skipped (optional arguments). Dask arrays may come with in-memory
    arrays of their chunks' library (NumPy or CuPy), as Dask's own operations allow:
    that is a Dask call, whose in-memory operands :func:`as_dask_operands` wraps.
    """
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
    if library in (TORCH, CUPY, JAX):
        placed = [
            (n, compat.device(a)) for n, a in zip(names, arrays, strict=True) if a is not None
        ]
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
    """Dask arrays, and in-memory arrays of their blocks' library beside them: a Dask call.

    Dask combines such operands block by block (``x * numpy_mask`` is a Dask array), so
    the in-memory arrays must be of the library of the Dask arrays' blocks: NumPy
    beside NumPy-backed Dask arrays, CuPy beside CuPy-backed ones. Other mixtures fail
    here, at the call, rather than when the blocks are computed.
    """
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
    """`arrays` with each in-memory array wrapped, lazily, as a Dask array.

    For calls that :func:`inspect_arrays` found to be Dask calls. A wrapped array's
    axis takes the chunks of a Dask operand's axis of the same label and length
    (`labels`: one label per axis of each array; by default the position counted from
    the end, as broadcasting aligns axes), so that no rechunking follows; others get
    Dask's automatic chunks. ``None`` entries and Dask arrays are returned as they are.
    """
    from ._backends.dask.operands import wrap  # dask is imported: a Dask array was passed

    return wrap(arrays, labels)
