"""Whether torch.compile is tracing, without importing torch; and :func:`memo`, an
``lru_cache`` that steps aside while Dynamo traces (it warns about each one it meets)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["memo", "tracing"]

F = TypeVar("F", bound=Callable[..., Any])


def tracing() -> bool:
    """True while torch.compile traces (torch folds ``is_compiling`` to True there)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def memo(maxsize: int | None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)``, bypassed while torch.compile traces."""

    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize)(fn)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            return fn(*args) if tracing() else cached(*args)

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate
