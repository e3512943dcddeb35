"""``einsum`` and ``einsum_path`` with numpy's semantics on every array-API library.

The array API standard has no einsum. This one parses numpy's subscripts (both
formats), chooses a contraction order, and lowers every pairwise step to one batched
``matmul`` of the arrays' own namespace, so it runs wherever ``matmul``, ``reshape`` and
``permute_dims`` do, keeps gradients, and is as fast as the backend's GEMM. Plans are
cached per (library, subscripts, shapes, dtypes, strides, optimize, memory_limit), so a
repeated call costs a dictionary lookup plus the arithmetic.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from . import _dispatch
from ._arrays import DASK, NUMPY, TORCH, ArrayArgs, as_dask_operands, inspect_arrays
from ._einsum.parse import Equation, label_names, parse, split_interleaved
from ._einsum.path import choose, chunk_shapes, normalize_optimize
from ._einsum.plan import Plan, build
from ._einsum.report import describe

__all__ = ["EinsumArgs", "einsum", "einsum_path"]


class EinsumArgs(NamedTuple):
    """Normalised arguments every einsum implementation receives."""

    plan: Plan
    operands: tuple[Any, ...]
    dtype: Any  # the result dtype, an object of the arrays' namespace
    xp: Any
    plan_for: Callable[[dict[int, int]], Plan]  # plans for chunks (memory_limit)
    subscripts: str  # the equation as a string of letters (for native einsum calls)


class _Entry(NamedTuple):
    plan: Plan
    dtype: Any
    plan_for: Callable[[dict[int, int]], Plan]
    subscripts: str
    names: dict[int, str]


_fast_types: dict[type, tuple[str, Any]] = {}
_CACHE_MAX = 4096
_OPERAND_NAMES = tuple(f"operand {k}" for k in range(64))


def _operand_names(n: int) -> tuple[str, ...]:
    return (
        _OPERAND_NAMES[:n] if n <= len(_OPERAND_NAMES) else tuple(f"operand {k}" for k in range(n))
    )


def _np_dtype(d: Any) -> np.dtype[Any]:
    if isinstance(d, np.dtype):
        return d
    return np.dtype(str(d).rsplit(".", 1)[-1])


@lru_cache(maxsize=256)
def _result_dtype(xp: Any, dtypes: tuple[Any, ...]) -> Any:
    """numpy's result type of `dtypes`, as a dtype of `xp`."""
    try:
        name = np.result_type(*[_np_dtype(d) for d in dtypes]).name
        return getattr(xp, name)
    except (TypeError, AttributeError):  # a dtype numpy lacks (bfloat16, ...)
        return dtypes[0] if len(dtypes) == 1 else xp.result_type(*dtypes)


def _memory_order(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> tuple[int, ...]:
    """Axes from outermost to innermost in memory (C order when strides are unknown)."""
    if strides is None:
        return tuple(range(len(shape)))
    return tuple(sorted(range(len(shape)), key=lambda a: (-abs(strides[a]), a)))


def _check_memory_limit(memory_limit: Any) -> int | None:
    if memory_limit is None:
        return None
    if isinstance(memory_limit, bool):
        raise TypeError("memory_limit must be a positive integer (elements) or None, got bool")
    try:
        limit = operator.index(memory_limit)
    except TypeError:
        raise TypeError(
            "memory_limit must be a positive integer (elements) or None, got "
            f"{type(memory_limit).__name__}"
        ) from None
    if limit < 1:
        raise ValueError(f"memory_limit must be a positive integer (elements), got {limit}")
    return limit


def _split(subscripts: Any, operands: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """(subscripts key, operands) for either calling format."""
    if isinstance(subscripts, str):
        return subscripts, operands
    if hasattr(subscripts, "shape") and hasattr(subscripts, "dtype"):
        ops, key = split_interleaved((subscripts, *operands))
        return key, ops
    raise TypeError(
        "einsum: subscripts must be a string such as 'ij,jk->ik', or the first operand of "
        f"the interleaved format (op0, sublist0, op1, sublist1, ...), got "
        f"{type(subscripts).__name__}"
    )


def _layout(library: str, a: Any) -> tuple[int, ...] | None:
    if library == NUMPY:
        return tuple(a.strides)
    if library == TORCH:
        return tuple(a.stride())
    return None


def _shape(a: Any, k: int) -> tuple[int, ...]:
    shape = tuple(a.shape)
    for d in shape:
        if d is None or (isinstance(d, float) and math.isnan(d)):
            raise ValueError(
                f"einsum: operand {k} has an unknown shape {shape}; compute its chunk sizes "
                "first (dask: x.compute_chunk_sizes())"
            )
    return shape


def _inspect(ops: tuple[Any, ...]) -> ArrayArgs:
    """inspect_arrays, with a shortcut for the common case on the hot path: NumPy or
    CPU/CUDA torch operands all of one type (and, for torch, on one device)."""
    first = ops[0]
    kind = type(first)
    fast = _fast_types.get(kind)
    if fast is not None and all(type(a) is kind for a in ops):
        library, xp = fast
        if library == NUMPY:
            return ArrayArgs(NUMPY, "cpu", xp)
        dev = first.device
        if all(a.device == dev for a in ops):
            return ArrayArgs(TORCH, dev.type, xp)
    for k, a in enumerate(ops):
        if a is None:  # inspect_arrays skips None (its optional arguments)
            raise TypeError(f"einsum: operand {k} must be an array, got None")
    lib = inspect_arrays(_operand_names(len(ops)), ops)
    if lib.library in (NUMPY, TORCH) and kind not in _fast_types:
        _fast_types[kind] = (lib.library, lib.xp)  # one dict store: atomic, no lock needed
    return lib


def _lookup(
    subscripts: Any,
    operands: tuple[Any, ...],
    optimize: Any,
    memory_limit: Any,
) -> tuple[_dispatch.Call, _Entry]:
    key_subs, ops = _split(subscripts, operands)
    if not ops:
        raise ValueError("einsum: at least one operand is required")
    lib = _inspect(ops)
    library = lib.library
    if library == DASK:
        shapes = tuple(_shape(a, k) for k, a in enumerate(ops))
        # NumPy/CuPy operands beside Dask ones: wrapped with the chunks of their labels.
        eq = parse(key_subs, tuple(len(s) for s in shapes))
        ops = as_dask_operands(ops, eq.inputs)
    else:
        shapes = tuple(tuple(a.shape) for a in ops)
    dtypes = tuple(a.dtype for a in ops)
    layouts = tuple(_layout(library, a) for a in ops)
    opt_key = optimize if optimize == "auto" else normalize_optimize(optimize)
    limit = _check_memory_limit(memory_limit)
    plan_args = (lib.xp, key_subs, shapes, dtypes, layouts, opt_key, limit)
    try:
        entry = _cached_plan(*plan_args)
    except TypeError:  # an unhashable sublist element: plan without caching
        entry = _plan(*plan_args)
    args = EinsumArgs(entry.plan, ops, entry.dtype, lib.xp, entry.plan_for, entry.subscripts)
    return _dispatch.Call(library, lib.device, (args,)), entry


def _plan(
    xp: Any,
    subscripts: Any,
    shapes: tuple[tuple[int, ...], ...],
    dtypes: tuple[Any, ...],
    layouts: tuple[Any, ...],
    optimize: Any,
    memory_limit: int | None,
) -> _Entry:
    eq = parse(subscripts, tuple(len(s) for s in shapes))
    labels = [x for t in eq.inputs for x in t]
    names = label_names(labels)
    orders = tuple(_memory_order(s, st) for s, st in zip(shapes, layouts, strict=True))
    dtype = _result_dtype(xp, dtypes)
    boolean = bool(xp.isdtype(dtype, "bool"))
    plan = choose(eq, shapes, orders, boolean, optimize, memory_limit, names)

    @lru_cache(maxsize=64)
    def _chunk_plan(chunks: tuple[tuple[int, int], ...]) -> Plan:
        cs = chunk_shapes(eq, shapes, dict(chunks))
        return build(eq, cs, orders, boolean, plan.path, names)

    def plan_for(chunks: dict[int, int]) -> Plan:
        return _chunk_plan(tuple(sorted(chunks.items())))

    return _Entry(plan, dtype, plan_for, _equation_string(eq, names), names)


# An lru_cache rather than a dict: torch.compile traces through the wrapper without
# guarding on the cache's contents (guards over a dict of thousands of plans made each
# compilation take tens of seconds). It is thread-safe and bounded.
_cached_plan = lru_cache(maxsize=_CACHE_MAX)(_plan)


def _equation_string(eq: Equation, names: dict[int, str]) -> str:
    lhs = ",".join("".join(names[x] for x in t) for t in eq.inputs)
    return f"{lhs}->{''.join(names[x] for x in eq.output)}"


def _prepare(
    subscripts: Any, *operands: Any, optimize: Any = "auto", memory_limit: Any = None
) -> _dispatch.Call:
    return _lookup(subscripts, operands, optimize, memory_limit)[0]


_dispatch.define_operation("einsum", _prepare)


def einsum(
    subscripts: Any, *operands: Any, optimize: Any = "auto", memory_limit: Any = None
) -> Any:
    """Evaluate the Einstein summation `subscripts` on `operands`, as ``numpy.einsum``.

    Parameters
    ----------
    subscripts : str or array
        Subscripts such as ``"bnid,bnjd->bnij"``: letters label axes, ``...`` stands
        for broadcast dimensions, ``->`` introduces the output (without it the output is
        the labels that appear once, sorted, after any ellipsis dimensions). A label
        repeated in one operand takes a diagonal; labels missing from the output are
        summed. numpy's interleaved format ``einsum(op0, [0, 1], op1, [1, 2], [0, 2])``
        is accepted too, with any number of integer labels.
    *operands : arrays
        Arrays of one array-API library (NumPy, CuPy, PyTorch, JAX, Dask,
        array-api-strict, ...) on one device. Axes of size 1 broadcast against the
        same label in other operands. Not modified.
    optimize : bool, str or path, optional
        Contraction order: ``"auto"`` (default) or ``True`` ranks candidate orders with
        a cost model counting FLOPs, copies and transposes; ``"greedy"``, ``"optimal"``
        or another opt_einsum path finder name; ``False`` contracts left to right; or an
        explicit path as returned by :func:`einsum_path`.
    memory_limit : int, optional
        Largest number of elements any intermediate (a pairwise result, a copy or a
        broadcast temporary) may have. When the best order exceeds it, the
        contraction is computed in chunks of one or more labels.

    Returns
    -------
    array
        Same library and device as the operands; dtype as numpy computes it (the
        result type of the operands); bool operands give bool (any of the products).
        Complex operands are not conjugated. May be a view of an operand when no
        arithmetic is needed (a transpose or a diagonal), as with numpy.

    Raises
    ------
    TypeError
        If an operand is not an array, the operands come from two libraries, or
        `subscripts`, `optimize` or `memory_limit` has the wrong type.
    ValueError
        For malformed subscripts, too many or too few labels for an operand's
        dimensions, labels whose sizes differ, an output label not in any input,
        operands on two devices, or a non-positive `memory_limit`.

    Examples
    --------
    >>> import numpy as np, portops
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> portops.einsum("ij,kj->ik", a, a)
    array([[ 5., 14.],
           [14., 50.]])
    >>> portops.einsum("ii", np.eye(3))
    array(3.)
    """
    return _dispatch.invoke(
        "einsum", subscripts, *operands, optimize=optimize, memory_limit=memory_limit
    )


def einsum_path(
    subscripts: Any, *operands: Any, optimize: Any = "auto", memory_limit: Any = None
) -> tuple[list[Any], str]:
    """The contraction order :func:`einsum` uses, and a readable report of its steps.

    Parameters
    ----------
    subscripts, *operands, optimize, memory_limit
        As for :func:`einsum`.

    Returns
    -------
    path : list
        ``["einsum_path", (i, j), ...]``, numpy's format: each tuple names positions in
        the list of remaining operands; the result goes to the end. Pass it back as
        ``optimize=path``.
    report : str
        For each step: its kind (batched matmul, multiply, multiply-and-sum,
        diagonal, sum, transpose), equation, batch, M, N, K, FLOPs, the elements of
        its result and of the copies it makes; the FLOP counts and the largest
        intermediate; the chunking that `memory_limit` forced, if any.

    Raises
    ------
    TypeError, ValueError
        As for :func:`einsum`.
    """
    _, entry = _lookup(subscripts, operands, optimize, memory_limit)
    limit = _check_memory_limit(memory_limit)
    report = describe(entry.plan, entry.subscripts, entry.names, limit)
    return ["einsum_path", *entry.plan.path], report
