"""NumPy shear / unshear: a strided zero-fill and one strided copy (see _strided_shear)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _buffers as buffers
from ... import _dispatch
from ... import _strided_shear as strided
from ...shear import ShearArgs


def shear(a: ShearArgs) -> np.ndarray:
    """Gaps zeroed through strided views, then ``x`` copied into the windows' view."""
    return strided.shear(np, buffers.empty, a._replace(array=np.asarray(a.array)))


def unshear(a: ShearArgs) -> np.ndarray:
    """One copy of the strided view of every window of ``y`` (mask fused)."""
    return strided.unshear(np, buffers.empty, a._replace(array=np.asarray(a.array)))


_SUMMARY: dict[str, Any] = {
    "shear": "zero-fill of the gaps, one strided copy into the windows' view (as_strided)",
    "unshear": "one strided copy of the windows' view (as_strided), mask fused",
}
for _op, _fn in (("shear", shear), ("unshear", unshear)):
    _dispatch.register(
        _op, "numpy_strided", libraries=["numpy"], priority=10, summary=_SUMMARY[_op]
    )(_fn)
