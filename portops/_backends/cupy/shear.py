"""CuPy shear / unshear: CuPy's own strided views and copies (see portops._shear.strided)."""

from __future__ import annotations

from typing import Any

import cupy

from ... import extend
from ..._ops.shear import ShearArgs
from ..._shear import strided
from ...extend import Priority

_OPS = strided.numpy_like(cupy)


def _empty(shape: list[int], dtype: Any) -> Any:
    return cupy.empty(shape, dtype=dtype)


def shear(a: ShearArgs) -> Any:
    """Gaps zeroed through strided views, then ``x`` copied into the windows' view."""
    return strided.shear(_OPS, _empty, a)


def unshear(a: ShearArgs) -> Any:
    """One copy of the strided view of every window of ``y`` (mask fused)."""
    return strided.unshear(_OPS, _empty, a)


_SUMMARY = "cupy strided views and copies (as_strided), mask fused"
for _op, _fn in (("shear", shear), ("unshear", unshear)):
    extend.register(
        _op, "cupy_strided", libraries=["cupy"], priority=Priority.SPECIALIZED, summary=_SUMMARY
    )(_fn)
