"""``einsum`` and ``einsum_path`` with numpy's semantics on every array-API library:
each contraction step is one batched ``matmul``; lowerings are cached per signature.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from .. import _dispatch
from .. import _validate as check
from .._arrays import DASK, NUMPY, TORCH, ArrayArgs, as_dask_operands, inspect_arrays, library_of
from .._einsum.lowering import Lowering
from .._einsum.options import (
    as_arrays,
    check_keywords,
    check_operand_casts,
    numpy_dtype,
    with_order,
    write_out,
)
from .._einsum.parse import label_names, parse, spell, split_interleaved
from .._einsum.path import normalize_optimize
from .._einsum.plan import Plan
from .._einsum.report import EinsumReport, describe
from .._plans import PlanCache
from .._plans import key as plan_key
from .._tracing import memo, tracing
from .._types import ArrayT

__all__ = ["EinsumArgs", "einsum", "einsum_path"]


class EinsumArgs(NamedTuple):
    """Normalised arguments every einsum implementation receives."""

    lowering: Lowering  # the signature's facts; its plan is built when first asked for
    operands: tuple[Any, ...]
    dtype: Any  # the result dtype, an object of the arrays' namespace
    xp: Any
    subscripts: str  # the equation as a string of letters (for native einsum calls)

    @property
    def plan(self) -> Plan:
        """The lowered plan (built on first use: native einsum calls never need it)."""
        return self.lowering.plan

    @property
    def may_alias(self) -> bool:
        """Whether a result may be a view of the operand (implementations copy it)."""
        return self.lowering.equation.may_alias(self.lowering.sizes)

    @property
    def casts(self) -> bool:
        """Whether an operand's dtype differs from the result's."""
        return any(x.dtype != self.dtype for x in self.operands)


_fast_types: dict[type, tuple[str, Any]] = {}


@memo(256)
def result_dtype_of(xp: Any, dtypes: tuple[Any, ...], dtype: np.dtype[Any] | None) -> Any:
    """The result dtype, a dtype of `xp`: `dtype`, else numpy's result type of `dtypes`."""
    found = [numpy_dtype(d) for d in dtypes] if dtype is None else [dtype]
    if all(f is not None for f in found):  # not `None in`: dtype('float64') == None
        result = np.result_type(*found)
        if isinstance(dtypes[0], np.dtype):
            return result  # NumPy arrays: a dtype instance compares fastest with theirs
        if hasattr(xp, result.name):
            return getattr(xp, result.name)
    if dtype is not None:
        raise TypeError(f"einsum: dtype={dtype} has no equivalent in {xp.__name__}")
    return dtypes[0] if len(dtypes) == 1 else xp.result_type(*dtypes)  # bfloat16, ...


def _memory_order(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> tuple[int, ...]:
    """Axes from outermost to innermost in memory (C order when strides are unknown)."""
    # C order (the common case, strides decreasing) needs no sort.
    if strides is not None and any(abs(x) <= abs(y) for x, y in itertools.pairwise(strides)):
        return tuple(sorted(range(len(shape)), key=lambda a: (-abs(strides[a]), a)))
    return tuple(range(len(shape)))


def split_operands(operands: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """(subscripts key, operands) for either calling format."""
    if not operands:
        raise ValueError("einsum: no subscripts and no operands given")
    if isinstance(operands[0], str):
        return operands[0], operands[1:]
    ops, key = split_interleaved(operands)
    return key, ops


def _split_arrays(operands: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """:func:`split_operands`, with at least one operand, every one made an array."""
    key_subs, ops = split_operands(operands)
    if not ops:
        raise ValueError("einsum: at least one operand is required")
    return key_subs, as_arrays(ops)


def _shape(a: Any, k: int) -> tuple[int, ...]:
    shape = tuple(a.shape)
    if any(d is None or (isinstance(d, float) and math.isnan(d)) for d in shape):
        raise ValueError(
            f"einsum: operand {k} has an unknown shape {shape}; compute its chunk sizes "
            "first (dask: x.compute_chunk_sizes())"
        )
    return shape


def _inspect(ops: tuple[Any, ...]) -> ArrayArgs:
    """inspect_arrays, with a shortcut for operands of one NumPy or torch type."""
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
    lib = inspect_arrays(tuple(f"operand {k}" for k in range(len(ops))), ops)
    if lib.library in (NUMPY, TORCH):
        _fast_types[kind] = (lib.library, lib.xp)  # one dict store: atomic, no lock needed
    return lib


def _lookup(
    operands: tuple[Any, ...],
    optimize: Any,
    memory_limit: Any,
    dtype: Any = None,
    casting: str = "safe",
    split: tuple[Any, tuple[Any, ...]] | None = None,
) -> _dispatch.Call:
    """The call, its arguments planned (`split`: already split and converted)."""
    key_subs, ops = _split_arrays(operands) if split is None else split
    lib = _inspect(ops)
    library = lib.library
    if library == DASK:
        shapes = tuple(_shape(a, k) for k, a in enumerate(ops))
        # NumPy/CuPy operands beside Dask ones: wrapped with the chunks of their labels.
        ops = as_dask_operands(ops, parse(key_subs, tuple(len(s) for s in shapes)).inputs)
    else:
        shapes = tuple([tuple(a.shape) for a in ops])
    dtypes = tuple([a.dtype for a in ops])
    if dtype is not None:
        check_operand_casts(dtypes, dtype, casting)
    if library == NUMPY:
        layouts: tuple[Any, ...] = tuple([a.strides for a in ops])
    else:
        layouts = tuple([a.stride() if library == TORCH else None for a in ops])
    opt_key = optimize if optimize == "auto" else normalize_optimize(optimize)
    limit = memory_limit
    if limit is not None:
        limit = check.positive_int(limit, "memory_limit", "a positive integer (elements) or None")
    lowering, result_dtype, equation = _plan(
        lib.xp, key_subs, shapes, dtypes, layouts, opt_key, limit, dtype
    )
    args = EinsumArgs(lowering, ops, result_dtype, lib.xp, equation)
    return _dispatch.Call(library, lib.device, args)


@memo(4096)  # an lru_cache: thread-safe and bounded
def _plan(
    xp: Any,
    subscripts: Any,
    shapes: tuple[tuple[int, ...], ...],
    dtypes: tuple[Any, ...],
    layouts: tuple[Any, ...],
    optimize: Any,
    memory_limit: int | None,
    dtype: np.dtype[Any] | None,
) -> tuple[Lowering, Any, str]:
    """The signature's lowering, its result dtype and its equation in letters."""
    eq = parse(subscripts, tuple(len(s) for s in shapes))
    names = label_names([x for t in eq.inputs for x in t])
    orders = tuple([_memory_order(s, st) for s, st in zip(shapes, layouts, strict=True)])
    result_dtype = result_dtype_of(xp, dtypes, dtype)
    is_numpy = isinstance(result_dtype, np.dtype)
    boolean = result_dtype.kind == "b" if is_numpy else bool(xp.isdtype(result_dtype, "bool"))
    merge = "dask" not in getattr(xp, "__name__", "")  # see plan.build
    itemsize = getattr(result_dtype, "itemsize", 8) if merge else 0  # Dask: lazy, chunked
    lowering = Lowering(
        eq, shapes, orders, boolean, optimize, memory_limit, names, merge, int(itemsize)
    )
    return lowering, result_dtype, spell(eq.inputs, eq.output, names)


def clear_caches() -> None:
    """Empty every einsum plan cache (benchmarks of a first call use it)."""
    _plan.cache_clear()  # type: ignore[attr-defined]
    parse.cache_clear()  # type: ignore[attr-defined]
    PLANS.clear()


def _prepare(
    *operands: Any,
    optimize: Any = "auto",
    memory_limit: Any = None,
    dtype: Any = None,
    casting: str = "safe",
) -> _dispatch.Call:
    return _lookup(operands, optimize, memory_limit, dtype, casting)


_dispatch.define_operation("einsum", _prepare, lambda a: tuple(a.operands))


# A repeated call of a signature runs the plan its strategy made on the first call.
PLANS = PlanCache("einsum")
_preferences = _dispatch.current_preferences


def _planned_call(operands: tuple[Any, ...], optimize: Any) -> Any:
    """Run a string-subscripts call through its plan; NotImplemented if it does not qualify."""
    if not isinstance(optimize, (str, bool)):
        return NotImplemented
    ops = operands[1:]
    if not ops:
        return NotImplemented  # the full path raises numpy's error
    key = plan_key((operands[0], optimize), *ops)  # None while torch traces: checked first
    if key is None or _preferences() is not None:
        return NotImplemented
    plan = PLANS.get(key)
    if plan is None:
        # The key shows every operand is an array of one library: no conversion.
        call = _lookup(operands, optimize, None, split=(operands[0], ops))
        impl = _dispatch.select("einsum", call)
        plan = impl.choose(call.args).strategy.plan(call.args) if impl.strategies else None
        if plan is None:
            return impl.func(call.args)
        PLANS.put(key, plan)
    return plan(*ops)


@overload
def einsum(
    subscripts: str,
    /,
    *operands: ArrayT,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = "auto",
    memory_limit: Any = None,
) -> ArrayT: ...


@overload
def einsum(
    operand: ArrayT,
    sublist: Sequence[Any],
    /,
    *rest: Any,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = "auto",
    memory_limit: Any = None,
) -> ArrayT: ...


def einsum(
    *operands: Any,
    out: Any = None,
    dtype: Any = None,
    order: str = "K",
    casting: str = "safe",
    optimize: Any = "auto",
    memory_limit: Any = None,
) -> Any:
    """Evaluate the Einstein summation `subscripts` on `operands`, as ``numpy.einsum``.

    Called as ``einsum(subscripts, *operands, ...)`` or in numpy's interleaved format
    ``einsum(op0, sublist0, op1, sublist1, ..., [sublist_out], ...)``.

    Parameters
    ----------
    subscripts : str
        Subscripts such as ``"bnid,bnjd->bnij"``: letters label axes, ``...`` stands
        for broadcast dimensions, ``->`` introduces the output (without it the output is
        the labels that appear once, sorted, after any ellipsis dimensions). A label
        repeated in one operand takes a diagonal; labels missing from the output are
        summed. In the interleaved format, sublists are lists (or 1-d integer arrays)
        of labels 0-51 and ``Ellipsis``.
    *operands : arrays, numbers or sequences of numbers
        Arrays of one array-API library (NumPy, CuPy, PyTorch, JAX, Dask,
        array-api-strict, ...) on one device. Python numbers and sequences become
        arrays of that library (NumPy decides their dtype, as in ``numpy.einsum``);
        with no array among the operands, NumPy arrays. Axes of size 1 broadcast
        against the same label in other operands. Not modified.
    out : array, optional
        Written in place with the result (cast under `casting`, at every `optimize`,
        where ``numpy.einsum`` ignores `casting` when it optimizes) and returned; an array
        of the operands' library with the result's shape. JAX arrays are immutable, so
        `out` raises ``TypeError`` there.
    dtype : data type, optional
        Compute in this dtype (a NumPy dtype, a name such as ``"f8"`` or the library's
        own dtype); the operands are cast to it under `casting`. Default: the result
        type of the operands, as NumPy computes it.
    order : {"K", "A", "C", "F"}, optional
        Memory layout of the result, as in NumPy; ``"K"`` (default) keeps whatever
        layout the computation produced. Honoured for NumPy and torch; other
        libraries choose their own layout.
    casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, optional
        Which casts `dtype` and `out` may make (NumPy's rules, default ``"safe"``).
    optimize : bool, str, tuple or path, optional
        Contraction order: ``"auto"`` (default) or ``True`` ranks candidate orders with
        a cost model counting FLOPs, copies and transposes; ``"greedy"`` and
        ``"optimal"`` use NumPy's own path finders (``(name, memory_limit)`` tuples
        too), other opt_einsum path finder names (``"dp"``, ``"branch-2"``, ...)
        opt_einsum's; ``False`` contracts every operand in one step, as NumPy does,
        left to right; or an explicit path as returned by :func:`einsum_path`.
    memory_limit : int, optional
        Largest number of elements any intermediate (a pairwise result, a copy or a
        broadcast temporary) may have. When the best order exceeds it, the
        contraction is computed in chunks of one or more labels.

    Returns
    -------
    array
        Same library and device as the operands; dtype as NumPy computes it (the
        result type of the operands, or `dtype`); bool operands give bool (any of the
        products). Complex operands are not conjugated. Never a view of an operand
        (NumPy returns one for a transpose or a diagonal: here it is a copy); a 0-d
        NumPy result is a NumPy scalar, as from ``numpy.einsum``. `out` when given.
        NumPy operands of object dtype are handed to ``numpy.einsum`` itself.

    Raises
    ------
    TypeError
        If an operand is not an array, a number or a sequence of numbers, the operands
        come from two libraries, `subscripts`, `out`, `dtype`, `optimize` or
        `memory_limit` has the wrong type, or a cast is not allowed by `casting`.
    ValueError
        For no operands, malformed subscripts, too many or too few labels for an
        operand's dimensions, labels whose sizes differ, an output label not in any
        input, an interleaved label outside 0-51, operands on two devices, `out` of
        the wrong shape, an unknown `order` or `casting`, or a non-positive
        `memory_limit`.
    RuntimeError
        If an explicit path does not contract every operand into one (as NumPy).

    Examples
    --------
    >>> import numpy as np, portops
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> portops.einsum("ij,kj->ik", a, a)
    array([[ 5., 14.],
           [14., 50.]])
    >>> portops.einsum("ii", np.eye(3))
    np.float64(3.0)
    """
    defaults = out is None and dtype is None and memory_limit is None
    if defaults and order == "K" and casting == "safe" and operands and type(operands[0]) is str:
        result = _planned_call(operands, optimize)
        if result is not NotImplemented:
            return result
    if tracing():  # torch.compile: torch.einsum, with the facts found outside the graph
        from .._backends.torch.einsum import traced

        return traced(operands, out, (dtype, casting, order))
    casting, order, wanted = check_keywords(casting, order, dtype)
    if out is not None and library_of(out) is None:
        raise TypeError(f"einsum: out must be an array, got {type(out).__name__}")
    key_subs, arrays = _split_arrays(operands)
    kinds = {getattr(getattr(a, "dtype", None), "kind", None) for a in arrays}
    if library_of(arrays[0]) == NUMPY and "O" in (*kinds, getattr(wanted, "kind", None)):
        # Object arrays: numpy.einsum itself (Python objects have no BLAS to lower to).
        opt = False if optimize == "auto" else optimize
        kwargs = {"out": out, "dtype": dtype, "order": order, "casting": casting}
        return np.einsum(*operands, **kwargs, optimize=opt)
    call = _lookup(operands, optimize, memory_limit, wanted, casting, (key_subs, arrays))
    result = _dispatch.select("einsum", call).func(call.args)
    if out is not None:
        # `casting` governs out at every optimize (numpy.einsum ignores it when optimizing).
        return write_out(result, out, call.library, casting)
    return with_order(result, order, call.library, call.args.operands)


def einsum_path(
    *operands: Any, optimize: Any = "auto", memory_limit: Any = None
) -> tuple[list[Any], EinsumReport]:
    """The contraction order :func:`einsum` uses, and a report of its steps.

    Parameters
    ----------
    subscripts, *operands, optimize, memory_limit
        As for :func:`einsum` (only the operands' shapes, dtypes and layouts matter).

    Returns
    -------
    path : list
        ``["einsum_path", (i, j), ...]``, numpy's format: each tuple names positions in
        the list of remaining operands; the result goes to the end. Pass it back as
        ``optimize=path``. ``optimize=False`` gives one step over every operand, and
        ``("greedy", memory_limit)`` NumPy's path under that limit, as from
        ``numpy.einsum_path``.
    report : EinsumReport
        ``str(report)`` is a table, as NumPy's report string; its attributes hold the
        same facts: ``equation``, ``steps`` (each with ``kind`` -- batched matmul,
        multiply, multiply-and-sum, diagonal, sum, transpose -- ``equation``,
        ``batch``, ``m``, ``n``, ``k``, ``flops``, ``result`` and ``copies``, the
        elements of its result and of the copies it makes), ``naive_flops``,
        ``flops``, ``speedup``, ``largest_intermediate``, ``memory_limit`` and
        ``chunks`` (the labels `memory_limit` forced into chunks, if any).

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As for :func:`einsum`.
    """
    a = _lookup(operands, optimize, memory_limit).args
    report = describe(a.plan, a.subscripts, a.lowering.names, a.lowering.memory_limit)
    return ["einsum_path", *a.plan.path], report
