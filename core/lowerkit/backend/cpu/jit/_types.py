"""numba array types of the kernel signatures (inputs read-only, outputs writable, C order)."""

from __future__ import annotations

from numba import types

f4, f8, i8 = types.float32, types.float64, types.int64


def ro(ndim: int) -> types.Array:
    """A read-only C-contiguous float32 array (writable arrays convert to it)."""
    return types.Array(f4, ndim, "C", readonly=True)


def rw(ndim: int) -> types.Array:
    """A writable C-contiguous float32 array."""
    return types.Array(f4, ndim, "C")
