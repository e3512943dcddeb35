"""portops: array operations written once against the Python array API standard.

Each public operation validates its arguments once, then dispatches to the fastest
registered implementation for the arrays' library and device, falling back to a
pure array-API implementation for every other array type. Importing portops imports
no optional array library.
"""

from . import _tables  # noqa: F401  (the tuning tables: plain data)
from . import extend as extend  # the extension API, a public submodule
from ._buffers import cache_info, clear_cache, set_cache_limit
from ._dispatch import explain, implementations, prefer
from ._generic import einsum as _generic_einsum  # noqa: F401  (registers)
from ._generic import shear as _generic_shear  # noqa: F401  (registers)
from ._generic import shift_sum as _generic_shift_sum  # noqa: F401  (registers)
from ._generic import vecdot as _generic_vecdot  # noqa: F401  (registers)
from ._machine import machine
from ._ops.einsum import einsum, einsum_path
from ._ops.shear import shear, unshear
from ._ops.shift_sum import shift_sum, shift_sum_adjoint, shift_sum_pinv
from ._ops.vecdot import vecdot
from ._plans import stats as plan_stats
from ._threads import get_num_threads, set_num_threads, threads
from ._tuning import tables as tuning
from ._tuning import tune
from .dispersion import Dispersion

__all__ = [
    "Dispersion", "cache_info", "clear_cache", "einsum", "einsum_path", "explain",
    "get_num_threads", "implementations", "machine", "plan_stats", "prefer", "set_cache_limit",
    "set_num_threads", "shear", "shift_sum", "shift_sum_adjoint", "shift_sum_pinv", "threads",
    "tune", "tuning", "unshear", "vecdot"
]  # fmt: skip

__version__ = "0.1.0"
