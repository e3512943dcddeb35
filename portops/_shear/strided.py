"""shear / unshear for CuPy (any NumPy-like library): strided views, one copy.

Shear zeroes the gaps around the windows (a few strided fills, see
:mod:`portops._shear.layout`) and copies ``x`` (times the mask) into the strided view
of all windows in one call; unshear copies that view of ``y`` out in one call. Offsets
that are not evenly spaced take one copy per channel, fractional ones one
interpolation per channel. Written against the NumPy API that CuPy shares, with the
library module passed in; no library is imported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._kernels.geometry import linear_step
from .._ops.shear import ShearArgs
from .layout import View, gap_views, window_strides, windows_view, write_masked

Empty = Callable[[list[int], Any], Any]


def _as_strided(lib: Any, a: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """`as_strided` with byte strides; read-only where the library supports that."""
    tricks = lib.lib.stride_tricks
    if lib.__name__ == "numpy":
        return tricks.as_strided(a, shape, strides, writeable=a.flags.writeable)
    return tricks.as_strided(a, shape, strides)


def _view(lib: Any, out: Any, v: View) -> Any:
    """View `v` (element units) of the C-contiguous `out`."""
    item = out.itemsize
    flat = out.reshape(-1)[v.offset :]
    return _as_strided(lib, flat, v.shape, tuple(s * item for s in v.strides))


def _take(a: Any, axis: int, start: int, stop: int) -> Any:
    idx: list[Any] = [slice(None)] * a.ndim
    idx[axis] = slice(start, stop)
    return a[tuple(idx)]


def _channel(a: Any, axis: int, c: int) -> Any:
    """Channel `c` of `a`, axis kept; a broadcast (size-1) axis as it is."""
    return a if a.shape[axis] == 1 else _take(a, axis, c, c + 1)


def shear(lib: Any, empty: Empty, a: ShearArgs) -> Any:
    """Zero the gaps, then one strided copy of ``x`` (times the mask) into the windows."""
    x, offsets, fractions, ax, cax, mask = a[:6]
    width = x.shape[ax]
    wide = a.shape
    out = empty(list(wide), a.dtype)
    if out.size == 0:
        return out
    if fractions is not None:
        out.fill(0)
        for c, n in enumerate(offsets):
            xc = _channel(x, cax, c)
            mc = None if mask is None else _channel(mask, cax, c)
            oc = _take(out, cax, c, c + 1)
            f = fractions[c]
            write_masked(lib, _take(oc, ax, n, n + width), xc if f == 0 else xc * (1 - f), mc)
            if f != 0:
                zc = xc * f if mc is None else xc * (mc * f)
                window = _take(oc, ax, n + 1, n + 1 + width)
                lib.add(window, zc, out=window)
        return out
    gaps = gap_views(tuple(wide), ax, cax, offsets, width)
    view = windows_view(tuple(wide), tuple(x.shape), ax, cax, offsets)
    if gaps is None:
        out.fill(0)
    else:
        for v in gaps:
            _view(lib, out, v).fill(0)
    if view is not None:
        write_masked(lib, _view(lib, out, view), x, mask)
        return out
    for c, n in enumerate(offsets):
        dst = _take(_take(out, cax, c, c + 1), ax, n, n + width)
        write_masked(
            lib, dst, _channel(x, cax, c), None if mask is None else _channel(mask, cax, c)
        )
    return out


def unshear(lib: Any, empty: Empty, a: ShearArgs) -> Any:
    """One strided copy (times the conjugated mask) of every window of ``y``."""
    y, offsets, fractions, ax, cax, mask = a[:6]
    width = a.shape[ax]
    shape = list(a.shape)
    out = empty(shape, a.dtype)
    if out.size == 0:
        return out
    if mask is not None and lib.iscomplexobj(mask):
        mask = lib.conj(mask)
    lin = linear_step(offsets) if fractions is None else None
    if lin is not None:
        step, base = lin
        start = _take(y, ax, base, y.shape[ax])
        strides = window_strides(tuple(start.strides), ax, cax, step)
        write_masked(lib, out, _as_strided(lib, start, tuple(shape), strides), mask)
        return out
    for c, n in enumerate(offsets):
        yc = _take(y, cax, c, c + 1)
        dst = _take(out, cax, c, c + 1)
        mc = None if mask is None else _channel(mask, cax, c)
        f = 0.0 if fractions is None else fractions[c]
        if f == 0:
            write_masked(lib, dst, _take(yc, ax, n, n + width), mc)
            continue
        lib.multiply(_take(yc, ax, n, n + width), 1 - f, out=dst)
        lib.add(dst, _take(yc, ax, n + 1, n + 1 + width) * f, out=dst)
        if mc is not None:
            lib.multiply(dst, mc, out=dst)
    return out
