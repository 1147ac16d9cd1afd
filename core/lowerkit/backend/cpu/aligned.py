"""Arrays that start on a cache line.

numpy places a large array's data 16 bytes past a page boundary (its allocator's header),
so rows of AVX-512 stores straddle two cache lines. Measured on the project's machine
(Xeon, AVX-512, MKL's sgemm in a 2-thread team): the 1x1 convolution 24 -> 144 channels at
56x56 with ReLU6 took 94 us writing to numpy's array and 84 us writing to a 64-byte-aligned
one. glow_like's arenas are aligned by its memory plan; nnpack's outputs and scratch come
from here.
"""

from __future__ import annotations

import threading
from math import prod

import numpy as np

ALIGNMENT = 64
"""Bytes: a cache line, and one AVX-512 register."""


def aligned_empty(shape: tuple[int, ...] | int, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` whose data starts on an ``ALIGNMENT``
    boundary. Its ``base`` is the byte buffer holding it (``ALIGNMENT`` bytes larger)."""
    shape = (shape,) if isinstance(shape, int) else tuple(map(int, shape))
    dtype = np.dtype(dtype)
    raw, offset = aligned_buffer(prod(shape) * dtype.itemsize)
    # The constructor over the buffer, not slice, view and reshape: every nnpack output is
    # made here, and this took 3.4 us against 6.8 (AMD EPYC Zen 3, a 112 KB output).
    return np.ndarray(shape, dtype, raw, offset)


def aligned_buffer(nbytes: int) -> tuple[np.ndarray, int]:
    """A new uint8 buffer of ``nbytes + ALIGNMENT`` bytes and the offset in it of its first
    ``ALIGNMENT`` boundary (``nbytes`` from there are in the buffer)."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    return raw, -raw.ctypes.data % ALIGNMENT


_THREAD = threading.local()


def thread_buffer(name: str, floats: int) -> np.ndarray:
    """The calling thread's float32 scratch called ``name``, of at least ``floats`` floats and
    on a cache line — grown when a call needs more, then reused: steady-state calls allocate
    nothing (one thread runs one kernel at a time)."""
    buffer = getattr(_THREAD, name, None)
    if buffer is None or buffer.size < floats:
        buffer = aligned_empty(floats)
        setattr(_THREAD, name, buffer)
    return buffer
