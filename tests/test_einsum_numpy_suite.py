"""NumPy's own einsum tests, run against portops.einsum on NumPy arrays and torch tensors.

``vendored/numpy_test_einsum.py`` is NumPy 2.4.6's ``_core/tests/test_einsum.py``,
unchanged. It is loaded twice with its module-level ``np`` replaced by a stand-in that is
NumPy except for ``einsum`` and ``einsum_path``:

- ``TestEinsum``, ``TestEinsumPath``, ``test_overlap``, ...: portops on NumPy arrays;
- the ``...OnTorch`` copies: every NumPy operand whose dtype torch has is handed over as
  a CPU tensor sharing its memory (``out`` too, so in-place writes are seen), and the
  result comes back as a NumPy array (a view of the NumPy input when portops returned a
  view of the tensor). Operands of dtypes torch lacks (unsigned 16-64 bit, long double,
  object) keep the call on NumPy.

Excluded, because they check NumPy's own choices rather than einsum's results:
see ``EXCLUDED``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import portops

_SOURCE = Path(__file__).parent / "vendored" / "numpy_test_einsum.py"
_SHA256 = "cab8f8bd01a8d499c34d360ff6fbbe8a96b96e25be409588a49de01ecf73c1be"
_IMPORT = "\nimport numpy as np\n"

EXCLUDED = {
    "TestEinsum::test_einsum_sorting_behavior": (
        "splits NumPy's report string at its last '->'; portops' report is an object "
        "(its str is a table, its `equation` attribute the whole contraction); the "
        "naming and order it checks (interleaved labels 0-25 as 'A'-'Z', then 'a'-'z', "
        "sorted) are checked on that attribute in "
        "test_einsum.py::test_sublist_labels_follow_numpy"
    ),
    "TestEinsum::test_einsum_views": (
        "asserts that NumPy's einsum returns a view of its operand when no arithmetic is "
        "needed (a transpose, a diagonal); portops returns a new array, never a view of an "
        "input, so that mutating a result cannot change an operand "
        "(tests/test_aliasing.py)"
    ),
    "TestEinsum::test_einsum_0d_out": (
        "writes a float64 result into an int64 out under the default casting='safe' "
        "with optimize='optimal', which NumPy allows because its optimized path ignores "
        "`casting`; portops applies `casting` to out at every optimize, and checks a 0-d "
        "out in test_einsum.py::test_out_dtype_and_order_on_every_backend"
    ),
    "TestEinsumPath::test_path_type_input": (
        "asserts the path NumPy's greedy search picks for optimize=True; portops' "
        "optimize=True ranks orders with its own cost model (optimize='greedy' is "
        "NumPy's search and its paths are checked by test_long_paths and test_edge_paths)"
    ),
}


def _load(name: str, stand_in: types.ModuleType) -> types.ModuleType:
    """Execute the vendored file as module `name` with ``np`` bound to `stand_in`."""
    source = _SOURCE.read_text()
    assert hashlib.sha256(source.encode()).hexdigest() == _SHA256, "vendored file changed"
    assert source.count(_IMPORT) == 1
    source = source.replace(_IMPORT, "\nnp = __stand_in__\n")
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__stand_in__"] = stand_in
    module.__file__ = str(_SOURCE)
    sys.modules[name] = module
    exec(compile(source, str(_SOURCE), "exec"), module.__dict__)
    return module


class _NumpyWith(types.ModuleType):
    """NumPy, except for the einsum functions given."""

    def __init__(self, name: str, einsum: Any, einsum_path: Any) -> None:
        super().__init__(name)
        self.einsum = einsum
        self.einsum_path = einsum_path

    def __getattr__(self, attr: str) -> Any:
        return getattr(np, attr)


# -- torch round trip ---------------------------------------------------------------------

_TORCH_DTYPES = {
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
}


def _torch_can(a: Any) -> bool:
    if isinstance(a, (np.ndarray, np.generic)):
        return np.asarray(a).dtype.name in _TORCH_DTYPES
    return True  # numbers, lists: portops converts them itself


def _as_tensor(a: np.ndarray | np.generic) -> Any:
    import torch

    arr = np.asarray(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only arrays
        try:
            return torch.from_numpy(arr)
        except ValueError:  # negative strides
            return torch.from_numpy(arr.copy())


def _owner(a: np.ndarray) -> np.ndarray:
    return a if a.base is None else a.base


def _back_to_numpy(result: Any, pairs: list[tuple[np.ndarray, Any]]) -> Any:
    """The tensor `result` as NumPy: a view of the NumPy input it is a view of, if any."""
    import torch

    if not isinstance(result, torch.Tensor):
        return result
    result = result.detach()
    for array, tensor in pairs:
        owner = _owner(array)
        if (
            result.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
            and isinstance(owner, np.ndarray)
            and owner.base is None
            and owner.flags.c_contiguous
        ):
            offset = result.data_ptr() - owner.__array_interface__["data"][0]
            view = np.ndarray(
                tuple(result.shape),
                dtype=array.dtype,
                buffer=owner,
                offset=offset,
                strides=tuple(s * array.itemsize for s in result.stride()),
            )
            if not array.flags.writeable:
                view.flags.writeable = False
            return view
    out = result.numpy()
    return out[()] if out.ndim == 0 else out


def _on_torch(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    interleaved = bool(args) and not isinstance(args[0], str)
    positions = range(0, len(args), 2) if interleaved else range(1, len(args))
    if interleaved and len(args) % 2 == 1:
        positions = range(0, len(args) - 1, 2)
    operands = [args[k] for k in positions]
    out = kwargs.get("out")
    values = [*operands, *([out] if out is not None else [])]
    if not all(_torch_can(a) for a in values) or (
        kwargs.get("dtype") is not None and np.dtype(kwargs["dtype"]).name not in _TORCH_DTYPES
    ):
        return fn(*args, **kwargs)  # a dtype torch lacks: the call stays on NumPy
    pairs = []
    new_args = list(args)
    for k in positions:
        a = args[k]
        if isinstance(a, (np.ndarray, np.generic)):
            new_args[k] = _as_tensor(a)
            if isinstance(a, np.ndarray):
                pairs.append((a, new_args[k]))
    if isinstance(out, np.ndarray):
        kwargs = {**kwargs, "out": _as_tensor(out)}
    result = fn(*new_args, **kwargs)
    if out is not None and result is kwargs["out"]:
        return out
    if fn is portops.einsum_path:
        return result
    return _back_to_numpy(result, pairs)


def _torch_einsum(*args: Any, **kwargs: Any) -> Any:
    return _on_torch(portops.einsum, args, kwargs)


def _torch_einsum_path(*args: Any, **kwargs: Any) -> Any:
    return _on_torch(portops.einsum_path, args, kwargs)


# -- the collected tests ------------------------------------------------------------------


def _exclude(cls: type, prefix: str) -> type:
    for key, reason in EXCLUDED.items():
        owner, _, name = key.partition("::")
        if owner == prefix and hasattr(cls, name):
            setattr(cls, name, pytest.mark.skip(reason=reason)(getattr(cls, name)))
    return cls


_numpy_module = _load(
    "portops_numpy_test_einsum",
    _NumpyWith("numpy_with_portops_einsum", portops.einsum, portops.einsum_path),
)
TestEinsum = _exclude(type("TestEinsum", (_numpy_module.TestEinsum,), {}), "TestEinsum")
TestEinsumPath = _exclude(
    type("TestEinsumPath", (_numpy_module.TestEinsumPath,), {}), "TestEinsumPath"
)
test_overlap = _numpy_module.test_overlap
test_einsum_chunking_precision = _numpy_module.test_einsum_chunking_precision

if importlib.util.find_spec("torch") is not None:
    _torch_module = _load(
        "portops_numpy_test_einsum_torch",
        _NumpyWith("numpy_with_portops_einsum_on_torch", _torch_einsum, _torch_einsum_path),
    )
    TestEinsumOnTorch = _exclude(
        type("TestEinsumOnTorch", (_torch_module.TestEinsum,), {}), "TestEinsum"
    )
    TestEinsumPathOnTorch = _exclude(
        type("TestEinsumPathOnTorch", (_torch_module.TestEinsumPath,), {}), "TestEinsumPath"
    )
    test_overlap_on_torch = _torch_module.test_overlap
    test_einsum_chunking_precision_on_torch = _torch_module.test_einsum_chunking_precision
