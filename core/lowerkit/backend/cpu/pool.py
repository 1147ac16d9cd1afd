"""One process-wide worker pool per thread count, where the calling thread runs one share.

Where pinning is on (:func:`.cores.pinning_on`) and the process may run on at least as many
CPUs as the pool has threads, each worker is pinned to a CPU of its own (worker ``j`` to the
``j``-th CPU of the affinity mask at the pool's creation), and the calling thread — on a call
that comes :data:`IDLE_S` or more after the pool's last call ended, and on the
:data:`WARM_CALLS` - 1 calls after it — to the first of them while it runs its share; its own
mask comes back when the call ends.

Why: the caller and the workers hand the GIL to each other between kernels, and on the 2-vCPU
VM, after an idle pause, the scheduler put the woken thread on the CPU of the one that woke
it, where the two shared one CPU for the rest of the call. MobileNetV3-Small at batch 8 (two
batch slices, one per thread), 0.05 s between calls: a median 22.7 ms, each thread waiting
~9 ms of it for the CPU (``/proc/self/task/*/schedstat``), against 10.1 ms back to back. The
worker pinned alone: 19.9 ms (the caller was the one moved); worker and caller: 12.6. Pinned
at every call, back-to-back calls of MobileNetV3-Small and MobileNetV2 took 3-5% longer in
some runs; pinned after a pause only, as long as unpinned (best of 12: 6.4-6.9 ms against
6.1-6.9, 22.7-24.3 against 23.3-24.2), while calls 0.05 s apart took a median 8.8 ms against
15.6 unpinned (my scripts, Intel Xeon VM, session 35). But the calls right after such a call, unpinned,
found the caller beside the worker again: MobileNetV3-Small at batch 8, calls 2-4 after a 0.3
s pause took a median 14.3 ms against 7.5 from the 6th on; pinned for the WARM_CALLS calls
after a pause, 8.5, 8.0 and 7.8 (my script, session 36; pinned on every call, back to back,
paired: 0.999-1.005 of the time on four mobile models). The team's threads are pinned for the
same reason (``team.pin_team_workers``). ``LOWERKIT_TEAM_PINNING=0`` turns it off: read when a
pool starts for its workers, at every call for the calling thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cores import pinning_on

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()
# threads -> the CPUs of the pool's threads (the caller's first, then each worker's), where
# the pool's threads are pinned (see the module docstring)
_placements: dict[int, tuple[int, ...]] = {}
# A call coming sooner than this after the previous one ended leaves the caller where it is:
# the threads are still where the last call put them (see run_parallel) — except for the
# WARM_CALLS calls after one that came after such a pause, which pin the caller too.
IDLE_S = 0.002
WARM_CALLS = 8
_ended: dict[int, float] = {}  # threads -> when the last call on that pool ended
_warm_left: dict[int, int] = {}  # threads -> calls left that pin the caller after a pause


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

            placement = _placement(threads)
            if placement is None:
                executor = ThreadPoolExecutor(max(1, threads - 1), thread_name_prefix=f"lowerkit-cpu-{threads}")
            else:
                cpus = iter(placement[1:])  # the pool starts its workers one by one, each runs this once
                executor = ThreadPoolExecutor(max(1, threads - 1), thread_name_prefix=f"lowerkit-cpu-{threads}",
                                              initializer=lambda: _pin_this_thread(next(cpus)))
                _placements[threads] = placement
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
    executor = pool(threads)
    placement = _placements.get(threads)
    if time.perf_counter() - _ended.get(threads, 0.0) > IDLE_S:
        _warm_left[threads] = WARM_CALLS
    pin = _warm_left.get(threads, 0) > 0
    if pin:
        _warm_left[threads] -= 1
    mask = _pin_caller(placement[0]) if placement is not None and pin and pinning_on() else None
    try:
        futures = [executor.submit(fn, item) for item in items[:-1]]
        try:
            fn(items[-1])
        finally:
            for future in futures:
                future.exception()  # wait for all before raising anything
    finally:
        if mask is not None:
            _restore(mask)
        _ended[threads] = time.perf_counter()
    for future in futures:
        future.result()


def _placement(threads: int) -> tuple[int, ...] | None:
    """The CPUs a pool of ``threads`` threads pins them to, or None (see the module docstring)."""
    if threads < 2 or not pinning_on():
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return tuple(cpus[:threads]) if len(cpus) >= threads else None


def _pin_this_thread(cpu: int) -> None:
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:  # the CPU went away (a cgroup changed): stay unpinned
        pass


def _restore(mask: set[int]) -> None:
    try:
        os.sched_setaffinity(0, mask)
    except OSError:  # a CPU of it went away (a cgroup changed): the caller stays where it is
        pass


def _pin_caller(cpu: int) -> set[int] | None:
    """Pin the calling thread to ``cpu`` if its mask has it and more; its previous mask, else None."""
    try:
        mask = os.sched_getaffinity(0)
        if cpu not in mask or len(mask) == 1:
            return None
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return mask


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
