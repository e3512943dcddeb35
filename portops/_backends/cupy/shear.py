"""CuPy shear / unshear: CuPy's own strided views and copies (see portops._shear.strided)."""

from __future__ import annotations

import functools

import cupy

from ... import extend
from ..._shear import strided
from ...extend import Priority

for _op, _kernel in (("shear", strided.shear), ("unshear", strided.unshear)):
    extend.register(
        _op,
        "cupy_strided",
        libraries=["cupy"],
        priority=Priority.SPECIALIZED,
        summary="cupy strided views and copies (as_strided), mask fused",
    )(functools.partial(_kernel, strided.numpy_like(cupy), cupy.empty))
