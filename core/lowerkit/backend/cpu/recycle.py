"""Large arrays a call returns, on memory that earlier calls' arrays have given back.

A region of a partitioned plan returns fresh arrays, and the next region reads them and drops
them. glibc serves an allocation of 32 MiB or more (its largest mmap threshold) with new
pages from the kernel and returns them at ``free``, so every call of such a region pays
the kernel to zero its outputs' pages again: ``[nnpack, glow_like]`` on UNet at batch 8 (256
x 256 maps; boundary arrays of 33-268 MB) spent 18.6% of its samples in the kernel's
``clear_page_erms`` (``perf record``, AMD EPYC Zen 3 VM), and glow_like alone, one region
whose arena stays, none.

:func:`recycled_empty` hands out such arrays over buffers it keeps. A buffer is free again
when nothing but this module refers to it: every array or view on it holds a reference to
it (numpy's ``base``, collapsed to the buffer), so CPython's reference count says when the
last one died — no finalizer, and no way for a view that outlives its array to see its
memory reused. A claim drops the free buffers that more than :data:`IDLE_CALLS` claims
passed over, and those past :data:`KEEP_BYTES` of free buffers in all
(``LOWERKIT_RECYCLE_BYTES`` overrides it, in bytes; 0 turns recycling off). Free buffers stay until a claim drops them, so a
process that stops calling holds its last calls' large outputs' memory; :func:`release`
drops them at once.
"""

from __future__ import annotations

import sys
import threading
from math import prod

import numpy as np

from .aligned import ALIGNMENT, aligned_buffer
from .environment import whole_number

MIN_BYTES = 32 << 20
"""Arrays from this size up are recycled: glibc maps smaller ones from its heap, which it
reuses itself."""

KEEP_BYTES = 4 << 30
"""Free buffers kept at most, in bytes (:data:`KEEP_ENV` overrides it)."""

KEEP_ENV = "LOWERKIT_RECYCLE_BYTES"

IDLE_CALLS = 64
"""A free buffer that this many claims in a row passed over is dropped at the next one."""

_lock = threading.Lock()
_buffers: list[list] = []  # [raw uint8 buffer, aligned offset, claims since it was last taken]


def keep_bytes() -> int:
    """The free bytes kept at most (:data:`KEEP_BYTES`, or ``LOWERKIT_RECYCLE_BYTES``)."""
    return whole_number(KEEP_ENV, KEEP_BYTES, "bytes (0 turns recycling off)")


def recycled_empty(shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` on a cache line, as
    :func:`~lowerkit.backend.cpu.aligned_empty` makes — from :data:`MIN_BYTES` up on a buffer
    an earlier array gave back, where one of exactly its size is free."""
    shape = tuple(map(int, shape))
    dtype = np.dtype(dtype)
    raw, offset = recycled_buffer(prod(shape) * dtype.itemsize)
    return np.ndarray(shape, dtype, raw, offset)


def recycled_buffer(nbytes: int) -> tuple[np.ndarray, int]:
    """:func:`~lowerkit.backend.cpu.aligned_buffer`'s buffer and offset — from
    :data:`MIN_BYTES` up a kept one of exactly that size where one is free (for a caller
    that builds its arrays over the buffer itself, as nnpack's spares do)."""
    limit = keep_bytes() if nbytes >= MIN_BYTES else 0
    if not limit:
        return aligned_buffer(nbytes)
    with _lock:
        return _claim(nbytes, limit)


def recycled_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array``: from :data:`MIN_BYTES` up into :func:`recycled_empty`'s
    array, else numpy's ``copy``."""
    if array.nbytes < MIN_BYTES:
        return array.copy()
    out = recycled_empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out


def _claim(nbytes: int, limit: int) -> tuple[np.ndarray, int]:
    """A free buffer of ``nbytes`` (plus the alignment), else a new one, kept from now on;
    free buffers past ``limit`` bytes in total or idle for :data:`IDLE_CALLS` claims dropped."""
    size = nbytes + ALIGNMENT
    found = None
    free_bytes = 0
    kept = []
    for entry in _buffers:
        if not _free(entry):
            kept.append(entry)
            continue
        if found is None and entry[0].size == size:
            found = entry
            kept.append(entry)
            continue
        entry[2] += 1
        if entry[2] <= IDLE_CALLS and free_bytes + entry[0].size <= limit:
            free_bytes += entry[0].size
            kept.append(entry)
    if found is None:
        raw, offset = aligned_buffer(nbytes)
        found = [raw, offset, 0]
        kept.append(found)
    found[2] = 0
    _buffers[:] = kept
    return found[0], found[1]


def _free(entry: list) -> bool:
    """Whether no array refers to the entry's buffer: two references to it are left, the
    entry's and ``getrefcount``'s argument."""
    return sys.getrefcount(entry[0]) <= 2


def release() -> int:
    """Drop every free buffer now (they stay kept otherwise, until later claims pass them
    by); returns the bytes dropped."""
    with _lock:
        dropped = sum(entry[0].size for entry in _buffers if _free(entry))
        _buffers[:] = [entry for entry in _buffers if not _free(entry)]
    return dropped


def recycled_bytes() -> tuple[int, int]:
    """Bytes of the buffers kept: ``(in use, free)``."""
    with _lock:
        free = sum(entry[0].size for entry in _buffers if _free(entry))
        total = sum(entry[0].size for entry in _buffers)
    return total - free, free
