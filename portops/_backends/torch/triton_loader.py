"""The package's Triton kernel modules, imported on first use (Triton is optional)."""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any


@cache
def triton_kernels(module: str) -> Any:
    """The Triton kernels `module` of this package, or None when Triton is not installed."""
    try:
        return importlib.import_module(f"{__package__}.{module}")
    except ImportError:
        return None
