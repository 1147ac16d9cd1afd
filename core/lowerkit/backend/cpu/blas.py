"""One process-wide, reference-counted limit on BLAS's threads while backend work runs.

A kernel that spreads work over a pool of ``w`` threads wants BLAS to use ``cores // w``
threads inside it (BLAS threads on top of pool threads would oversubscribe the cores, and
OpenBLAS's spinning threads collapse under contention). The BLAS thread count is one
setting for the whole process, so every backend must go through one limiter: two limiters
with their own reference counts on the same setting, entered and left in overlapping
order from two threads, restore each other's values (one left BLAS at 1 thread for good).

threadpoolctl does the setting; it is imported on first use, never at import of
``lowerkit.backend.cpu`` (install it with ``pip install 'lowerkit[cpu]'``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any

from .cores import cpu_count


class BlasLimiter:
    """Reference-counted BLAS thread limit: the first region in sets it, the last one out
    restores what it found; regions entering meanwhile run under the limit in force.

    threadpoolctl changes a process-global setting; nesting or overlapping plain
    ``threadpool_limits`` contexts from several threads would restore in the wrong order.
    threadpoolctl (>= 3.6) also lets only one "controlling" thread change OpenBLAS's
    process-wide pool and silently ignores the others; the first and last regions here may
    be in different threads, so control is released around every change — or, for an
    OpenBLAS on its own threads (the usual wheel), its two C entry points are called
    directly (:class:`_Control`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._controller: Any = None
        self._rescan_pending = False
        self._libs: list[_Control] | None = None  # the BLAS libraries' controls, found once
        self._restore: list[tuple[_Control, int]] = []  # (library, threads it had) to put back
        self._in_force: int | None = None  # the limit while any region is inside

    @property
    def depth(self) -> int:
        """How many regions are inside the limit now."""
        return self._depth

    @property
    def in_force(self) -> int | None:
        """The BLAS threads the regions inside run under; None while no region is inside."""
        return self._in_force

    def limit(self, blas_threads: int) -> AbstractContextManager[None]:
        """Context: BLAS runs on ``blas_threads`` threads (or the limit already in force) inside."""
        return _Region(self, blas_threads)

    def _acquire(self, blas_threads: int) -> None:
        with self._lock:
            if self._depth == 0:
                self._in_force = max(1, int(blas_threads))
                self._restore = self._enter(self._in_force)
            self._depth += 1

    def _release(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._in_force = None
                for control, threads in self._restore:
                    control.set(threads)
                self._restore = []

    def rescan(self) -> None:
        """Inspect the loaded libraries again at the next region: call after loading code that
        may bring its own BLAS (importing numba loads scipy's OpenBLAS)."""
        with self._lock:
            if self._depth == 0:
                self._controller, self._libs = None, None
            else:
                self._rescan_pending = True

    def _enter(self, blas_threads: int) -> list[tuple[_Control, int]]:
        """Set every BLAS library to ``blas_threads``; returns what to restore on exit.

        The hot path of every backend call: the libraries are inspected once (threadpoolctl's
        ``limit()`` would inspect them on every call), and a library already at the limit is
        left alone, so a call that changes nothing costs one query per library.
        """
        if self._rescan_pending:
            self._controller, self._libs, self._rescan_pending = None, None, False
        if self._libs is None:
            # Found on first use: threadpoolctl inspects the libraries loaded by then.
            if self._controller is None:
                self._controller = _threadpoolctl().ThreadpoolController()
            self._libs = [_Control.of(lib) for lib in self._controller.select(user_api="blas").lib_controllers]
        restore = []
        for control in self._libs:
            current = control.get()
            if current is not None and current != blas_threads:
                restore.append((control, current))
                control.set(blas_threads)
        return restore


class _Region:
    """One region inside a :class:`BlasLimiter` (a plain context manager: entered on every
    backend call, where a generator-based one cost more)."""

    __slots__ = ("_limiter", "_threads")

    def __init__(self, limiter: BlasLimiter, blas_threads: int) -> None:
        self._limiter, self._threads = limiter, blas_threads

    def __enter__(self) -> None:
        self._limiter._acquire(self._threads)

    def __exit__(self, *exc: object) -> None:
        self._limiter._release()


@dataclass(frozen=True)
class _Control:
    """How to read and set one BLAS library's threads.

    An OpenBLAS on its own thread pool (not OpenMP's): its C functions
    ``openblas_get_num_threads`` / ``openblas_set_num_threads``, found once through
    threadpoolctl (which knows the symbols' prefixes and suffixes). threadpoolctl's own
    methods run its controlling-thread bookkeeping in Python on every call: a region's
    enter and exit cost ~12 µs hot and 50-70 µs inside a model, where that code runs cold
    (glow_like's MobileNetV2 and EfficientNet-B0 calls, batch 1). Any other library goes
    through threadpoolctl, control released around each change.
    """

    get: Callable[[], int | None]
    set: Callable[[int], object]

    @classmethod
    def of(cls, lib: Any) -> _Control:
        if getattr(lib, "internal_api", None) == "openblas" and getattr(lib, "threading_layer", None) != "openmp":
            symbol = getattr(lib, "_get_symbol", None)  # threadpoolctl's own lookup (private: else the generic path)
            if symbol is not None:
                get, set_ = symbol("openblas_get_num_threads"), symbol("openblas_set_num_threads")
                if get is not None and set_ is not None:
                    return cls(get, set_)
        return cls(lib.get_num_threads, partial(_set_threads, lib))


def _threadpoolctl() -> Any:
    try:
        import threadpoolctl
    except ImportError as err:  # pragma: no cover - threadpoolctl is a dependency of the CPU plugins
        raise ImportError(
            "lowerkit.backend.cpu.blas_limit needs threadpoolctl; install it with pip install 'lowerkit[cpu]'"
        ) from err
    return threadpoolctl


def _set_threads(lib: Any, threads: int) -> None:
    """``lib.set_num_threads(threads)`` through threadpoolctl, free to run from any thread."""
    _release_control()
    lib.set_num_threads(threads)
    _release_control()


def _release_control() -> None:
    """Let any thread change OpenBLAS's limit next (see :class:`BlasLimiter`)."""
    controller_class = getattr(_threadpoolctl(), "OpenBLASController", None)
    clear = getattr(controller_class, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


LIMITER = BlasLimiter()
"""The process's one limiter: every backend's regions count here."""


def blas_limit(blas_threads: int) -> AbstractContextManager[None]:
    """Context limiting BLAS to ``blas_threads`` threads (at least 1) while work runs.

    Reference-counted over the whole process (all backends, all threads): the first region
    to enter sets the limit, the last to leave restores the setting it found.
    """
    return LIMITER.limit(blas_threads)


def blas_threads_beside(pool_threads: int) -> int:
    """BLAS threads that fit beside a pool of ``pool_threads`` threads: ``cores // pool_threads``, at least 1."""
    return max(1, cpu_count() // max(1, pool_threads))
