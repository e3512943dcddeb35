"""A pytest plugin of ``.ci/gpu``'s memcheck step: CuPy's memory pools off.

compute-sanitizer's memcheck sees an access past an array's end only where that end is the
end of a device allocation. A pool hands out pieces of larger allocations, so such an
access lands in a neighbour and goes unseen: with the pools off, every CuPy array is an
allocation of its own. (torch's caching allocator is turned off by the environment
variable ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, which the step sets.) Enabled by
``-p pytest_no_pools`` with this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    try:
        import cupy
    except ImportError:
        return
    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)
