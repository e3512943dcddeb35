"""The shift_sum operator for solver libraries: SciPy, PyLops and DeepInverse.

Each adapter wraps :func:`portops.shift_sum`, :func:`portops.shift_sum_adjoint` and
:func:`portops.shift_sum_pinv` with one set of keyword arguments (`step`, `mask`, `axis`,
`channel_axis`), so that the forward, the adjoint and the pseudo-inverse a solver sees
always describe the same operator. The solver library is imported when an adapter is
first built, never at ``import portops`` or ``import portops.adapters``::

    from portops.adapters import shift_sum_linear_operator  # SciPy LinearOperator
    from portops.adapters import shift_sum_pylops           # PyLops LinearOperator
    from portops.adapters import shift_sum_physics          # DeepInverse LinearPhysics

Install the libraries with the extras ``portops[scipy]``, ``portops[pylops]`` or
``portops[deepinv]``.
"""

from __future__ import annotations

from ._deepinv import shift_sum_physics
from ._pylops import shift_sum_pylops
from ._scipy import shift_sum_linear_operator

__all__ = ["shift_sum_linear_operator", "shift_sum_physics", "shift_sum_pylops"]
