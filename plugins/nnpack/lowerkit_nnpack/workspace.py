"""Per-thread scratch buffers, reused across calls so steady-state calls allocate nothing large."""

from __future__ import annotations

import threading
from math import prod

import numpy as np

from lowerkit.backend.cpu import aligned_empty


class Workspace:
    """Named scratch buffers, private to the calling thread, grown to the largest request.

    A buffer is one flat array per (name, dtype) and thread; :meth:`get` returns a view of
    its first ``prod(shape)`` elements. Kernels that run one after another on a thread (the
    nodes of one plan) can therefore share a workspace: it holds the largest layer's
    scratch, not the sum. Contents are undefined on return: callers overwrite what they
    read, padding borders included. Buffers with the same name must never be live at once
    in one thread.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[dict] = []  # every thread's buffers, for total_nbytes()

    def get(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A C-contiguous scratch array ``name`` of ``shape`` and ``dtype`` for the current thread."""
        buffers = self._local.__dict__.get("buffers")
        if buffers is None:
            buffers = self._local.buffers = {}
            with self._lock:
                self._all.append(buffers)
        dtype = np.dtype(dtype)
        size = prod(shape)
        key = (name, dtype.str)
        flat = buffers.get(key)
        if flat is None or flat.size < size:
            flat = aligned_empty(size, dtype)  # on a cache line: numpy's large arrays are not
            buffers[key] = flat
        return flat[:size].reshape(shape)

    def nbytes(self) -> int:
        """Bytes held by the current thread's buffers."""
        buffers = self._local.__dict__.get("buffers", {})
        return sum(b.nbytes for b in buffers.values())

    def total_nbytes(self) -> int:
        """Bytes held by the buffers of every thread that used this workspace."""
        with self._lock:
            return sum(b.nbytes for buffers in self._all for b in list(buffers.values()))


#: The workspace every execution plan uses. A thread runs one kernel at a time, so all
#: plans of the process can share it: each thread holds the largest layer's scratch of
#: everything it ran (a partitioned model is many small plans, one per region).
SHARED = Workspace()
