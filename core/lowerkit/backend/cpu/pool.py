"""One process-wide worker pool per thread count, where the calling thread runs one share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def pool(threads: int) -> ThreadPoolExecutor:
    """The process-wide pool serving calls on ``threads`` threads (created on first use).

    It has ``threads - 1`` workers: the calling thread runs one share itself. A larger pool
    would hand each call's shares to whichever idle workers it has, so a worker could meet
    a layer for the first time (and allocate its per-thread workspace) long after warm-up.
    Every backend calling with the same thread count shares the pool: no backend or handle
    owns threads, and a machine never runs more than one pool per thread count.
    """
    with _pools_lock:
        executor = _pools.get(threads)
        if executor is None:
            # Imported here: concurrent.futures (and the logging it brings) costs ~6 ms at
            # every start-up, and listing the backends never runs a pool.
            from concurrent.futures import ThreadPoolExecutor

            executor = ThreadPoolExecutor(max(1, threads - 1), thread_name_prefix=f"lowerkit-cpu-{threads}")
            _pools[threads] = executor
        return executor


def run_parallel(threads: int, fn: Callable[[Any], None], items: Sequence[Any]) -> None:
    """Run ``fn(item)`` for every item on ``threads`` threads, the calling one included.

    The calling thread runs the last item; the others go to :func:`pool` ``(threads)``.
    Returns when every item is done and re-raises the first error (after all have ended).
    ``fn`` must not wait for another item (items sharing one pool could then deadlock) and
    must write only its own part of shared buffers.
    """
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    # The caller runs one item instead of sleeping on the futures: one thread wake-up
    # fewer per call, and the caller's core is not idle.
    futures = [pool(threads).submit(fn, item) for item in items[:-1]]
    try:
        fn(items[-1])
    finally:
        for future in futures:
            future.exception()  # wait for all before raising anything
    for future in futures:
        future.result()


@dataclass(frozen=True, slots=True)
class Parallel:
    """A fixed fan-out: ``parallel(task)`` runs ``task(j)`` for ``j in range(ways)`` on the
    shared pool of ``ways`` threads (see :func:`run_parallel`).

    Kernels bound once for a given width keep one of these and index their per-worker
    bands and scratch by ``j``.
    """

    ways: int

    def __call__(self, task: Callable[[int], None]) -> None:
        run_parallel(self.ways, task, range(self.ways))
