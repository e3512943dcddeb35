"""Per-signature call plans: validate and choose once, then only launch.

Everything a call's cost depends on apart from the array *values* — library, shapes,
strides, dtypes, device, step or offsets, axes, mask layout, gradient mode — forms its
*signature*. The first call with a signature runs the full path (validation, dispatch)
and the chosen implementation's *planner* turns the normalised arguments into a *plan*:
a function of the raw arrays that does only the per-call work (allocate the result,
launch the kernel). Later calls with the same signature look the plan up and run it.

Plans live in a bounded cache per operation (``PORTOPS_PLAN_CACHE`` entries each,
default 512, 0 turns plans off); when it is full the oldest plan is dropped. Only
NumPy arrays, torch tensors and CuPy arrays get plans: other libraries (JAX traces,
Dask graphs) pay their dispatch once per trace or graph anyway.

Signatures are built without importing any library: the functions that read them are
chosen by the array's exact type.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Hashable
from typing import Any

from ._arrays import CUPY, NUMPY, TORCH, library_of

__all__ = ["PlanCache", "pair_signature", "plan_cache_size", "signature"]

Plan = Callable[..., Any]


def _env_size(name: str, default: int) -> int:
    """A non-negative integer setting; a malformed one warns, naming it, and the default
    is used (it tunes speed, never results)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        warnings.warn(
            f"{name} must be a non-negative integer, got {raw!r}; using {default}",
            RuntimeWarning,
            stacklevel=2,
        )
        return default
    return value


_MAX_PLANS = _env_size("PORTOPS_PLAN_CACHE", 512)


def plan_cache_size() -> int:
    """Plans kept per operation (``PORTOPS_PLAN_CACHE``; 0: no plans)."""
    return _MAX_PLANS


class PlanCache:
    """A bounded map from signature to plan; reads take no lock."""

    def __init__(self, maxsize: int | None = None) -> None:
        self.maxsize = _MAX_PLANS if maxsize is None else maxsize
        self._plans: dict[Hashable, Plan] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Plan | None:
        return self._plans.get(key)

    def put(self, key: Hashable, plan: Plan) -> None:
        if self.maxsize <= 0:
            return
        with self._lock:
            while len(self._plans) >= self.maxsize:
                del self._plans[next(iter(self._plans))]  # the oldest
            self._plans[key] = plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


# ----------------------------------------------------------------------------- signatures

_torch: Any = None  # the torch module, once a tensor has been seen


def _torch_state() -> tuple[bool, bool]:
    """(tracing under torch.compile, gradient mode on).

    ``torch.compiler.is_compiling`` is looked up on the module at every call: under
    torch.compile, dynamo recognises that very attribute and folds it to True.
    """
    global _torch
    torch = _torch
    if torch is None:
        import torch  # already imported: a tensor was passed

        _torch = torch
    return torch.compiler.is_compiling(), torch.is_grad_enabled()


def _numpy_array(a: Any) -> Hashable:
    return (a.dtype, a.shape, a.strides)


def _torch_array(a: Any) -> Hashable:
    return (a.dtype, a.shape, a.stride(), a.get_device(), a.requires_grad, a.is_conj())


def _cupy_array(a: Any) -> Hashable:
    return (a.dtype, a.shape, a.strides, a.data.device_id)


_READERS = {NUMPY: _numpy_array, TORCH: _torch_array, CUPY: _cupy_array}
_reader_by_type: dict[type, Callable[[Any], Hashable] | None] = {}


def _reader(t: type, a: Any) -> Callable[[Any], Hashable] | None:
    try:
        return _reader_by_type[t]
    except KeyError:
        pass
    lib = library_of(a)
    reader = _READERS.get(lib) if lib is not None else None
    if lib == NUMPY and t.__module__ != "numpy":  # subclasses (masked arrays, ...)
        reader = None
    _reader_by_type[t] = reader
    return reader


def _scalar_key(v: Any) -> Hashable | None:
    """`v` itself when it is a plain int, a tuple of the ints of a list/tuple, else None.

    ``True == 1`` in a dict key, so bools are refused here (validation rejects them).
    """
    if type(v) is int:
        return v
    if type(v) in (list, tuple):
        for item in v:
            if type(item) is not int:
                return None
        return ("seq", *v)
    return None


def signature(
    a: Any, mask: Any, step: Any, axis: Any, channel_axis: Any, keepdims: Any, extra: Any = None
) -> Hashable | None:
    """The signature of a shift_sum-family call, or None when it gets no plan.

    `extra` is an optional int argument of the call (``channels``) or None.

    None for other libraries, torch.compile tracing, unusual argument types (the
    full path validates them) and arrays of two types.
    """
    if _MAX_PLANS <= 0:
        return None
    t = type(a)
    reader = _reader(t, a)
    if reader is None:
        return None
    if type(axis) is not int or type(channel_axis) is not int or type(keepdims) is not bool:
        return None
    step_key = _scalar_key(step)
    if step_key is None or (extra is not None and type(extra) is not int):
        return None
    grad = False
    if reader is _torch_array:
        compiling, grad = _torch_state()
        if compiling:
            return None
    if mask is None:
        mask_key: Hashable = None
    else:
        if type(mask) is not t:
            return None
        mask_key = reader(mask)
    return (t, reader(a), mask_key, step_key, axis, channel_axis, keepdims, extra, grad)


def pair_signature(a: Any, b: Any, axis: Any, keepdims: Any) -> Hashable | None:
    """The signature of a call on two arrays of one type (vecdot), or None."""
    if _MAX_PLANS <= 0:
        return None
    t = type(a)
    if type(b) is not t or type(axis) is not int or type(keepdims) is not bool:
        return None
    reader = _reader_by_type.get(t, _UNSEEN)
    if reader is _UNSEEN:
        reader = _reader(t, a)
    if reader is _torch_array:
        return _torch_pair(a, b, axis, keepdims)
    if reader is None:
        return None
    return (t, reader(a), reader(b), axis, keepdims, False)


_UNSEEN: Any = object()


def _torch_pair(a: Any, b: Any, axis: int, keepdims: bool) -> Hashable | None:
    """:func:`pair_signature` of two tensors, flat: the fewest attribute reads (each
    costs about 0.1 us on a tensor, the largest part of a tiny call's overhead).
    ``portops.vecdot`` builds the same key inline for the calls after its first; this
    one keys its first call and tensor subclasses (``torch.nn.Parameter``).

    A conjugate view is only possible for complex dtypes; gradient flags count only
    while gradients are enabled; two CPU tensors' devices are one flag (two cheap reads).
    """
    torch = _torch
    if torch is None:
        _torch_state()
        torch = _torch
    if torch.compiler.is_compiling():
        return None
    da, db = a.dtype, b.dtype
    grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    conj = (da.is_complex and a.is_conj()) or (db.is_complex and b.is_conj())
    device = (a.is_cpu and b.is_cpu) or (a.get_device(), b.get_device())
    return (
        da, a.shape, a.stride(), db, b.shape, b.stride(), device,
        axis, keepdims, grad, conj,
    )  # fmt: skip
