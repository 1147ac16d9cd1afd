"""Per-thread scratch buffers, reused across calls so steady-state calls allocate nothing large."""

from __future__ import annotations

import threading

import numpy as np


class Workspace:
    """Buffers keyed by (name, shape, dtype), private to the calling thread.

    Each kernel owns one ``Workspace``; every thread that runs the kernel (a caller or a
    pool worker) sees its own buffers, so concurrent calls never share scratch memory.
    Buffers are created filled (zero by default): kernels rely on regions they never write
    (padding borders) keeping that value.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def get(
        self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32, fill: float = 0.0
    ) -> np.ndarray:
        """The buffer ``name`` of this shape and dtype for the current thread (new ones hold ``fill``)."""
        buffers = self._local.__dict__.setdefault("buffers", {})
        key = (name, tuple(shape), np.dtype(dtype).str)
        buf = buffers.get(key)
        if buf is None:
            buf = np.full(shape, fill, dtype=dtype)
            buffers[key] = buf
        return buf

    def nbytes(self) -> int:
        """Bytes held by the current thread's buffers (for docs and tests)."""
        buffers = self._local.__dict__.get("buffers", {})
        return sum(b.nbytes for b in buffers.values())
