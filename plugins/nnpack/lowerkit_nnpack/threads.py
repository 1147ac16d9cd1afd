"""The worker pools and the BLAS thread limit that keeps pool x BLAS threads within the cores."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def cpu_count() -> int:
    """Cores usable by this process."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def pool(threads: int) -> ThreadPoolExecutor:
    """The process-wide pool serving calls on ``threads`` threads (created on first use).

    It has ``threads - 1`` workers: the calling thread runs one share itself. A larger pool
    would hand each call's shares to whichever idle workers it has, so a worker could meet
    a layer for the first time (and allocate its workspace) long after warm-up.
    """
    with _pools_lock:
        executor = _pools.get(threads)
        if executor is None:
            executor = ThreadPoolExecutor(max(1, threads - 1), thread_name_prefix=f"lowerkit-nnpack-{threads}")
            _pools[threads] = executor
        return executor


def run_parallel(threads: int, fn: Callable[[Any], None], items: Sequence[Any]) -> None:
    """Run ``fn(item)`` for every item, spread over the pool and the calling thread; re-raise the first error.

    ``fn`` must only use per-thread scratch (the caller's own buffers are in use).
    """
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    # The caller runs the last item itself instead of sleeping on the futures: one thread
    # wake-up fewer per call, and the caller's core is not idle.
    futures = [pool(threads).submit(fn, item) for item in items[:-1]]
    try:
        fn(items[-1])
    finally:
        for future in futures:
            future.exception()  # wait for all before raising anything
    for future in futures:
        future.result()


def split(total: int, parts: int) -> list[slice]:
    """``total`` split into at most ``parts`` contiguous, nearly equal, non-empty slices."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    slices, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        slices.append(slice(start, stop))
        start = stop
    return slices


class _BlasLimiter:
    """Reference-counted BLAS thread limit: the first caller sets it, the last one restores it.

    threadpoolctl changes a process-global setting; nesting or overlapping plain
    ``threadpool_limits`` contexts from several threads would restore in the wrong order.
    threadpoolctl (>= 3.6) also lets only one "controlling" thread change OpenBLAS's
    process-wide pool and silently ignores the others; the first and last callers here
    may be different threads, so control is released after every change.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._context: Any = None
        self._controller: Any = None

    @contextmanager
    def limit(self, blas_threads: int) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._context = self._enter(blas_threads)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._context is not None:
                    _release_control()
                    self._context.restore_original_limits()
                    _release_control()
                    self._context = None

    def _enter(self, blas_threads: int) -> Any:
        if self._controller is None:
            from threadpoolctl import ThreadpoolController

            self._controller = ThreadpoolController()
        _release_control()
        context = self._controller.limit(limits=blas_threads, user_api="blas")
        _release_control()
        return context


def _release_control() -> None:
    """Let any thread change OpenBLAS's limit next (see :class:`_BlasLimiter`)."""
    import threadpoolctl

    controller_class = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller_class, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


_limiter = _BlasLimiter()


def blas_limit(pool_threads: int) -> Any:
    """Context limiting BLAS to ``cores // pool_threads`` threads (at least 1) while work runs."""
    return _limiter.limit(max(1, cpu_count() // max(1, pool_threads)))
