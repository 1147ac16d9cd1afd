"""Team regions for one image: :class:`Team` (what a backend's kernels are bound with),
:class:`StallGuard`, which turns a handle's team regions off while they stall, and
:func:`pin_team_workers`, which gives each team thread a CPU of its own.

``make_team(ways)`` gives a :class:`Team` where team kernels can run here (numba's OpenMP
layer, a ``cblas_sgemm``; see ``lowerkit.backend.cpu.jit.layer``), else None.

Pinning the team's threads:

A region's team threads (OpenMP's, one set per thread that starts regions) sleep once calls
stop for a while. On the 2-vCPU VM these kernels are measured on, a worker woken after a
pause of 30 ms or more often landed on the CPU where the calling thread already ran and
waited there until the scheduler moved one of them — the calling thread spinning at the end
of the first region all the while: MobileNetV2 at batch 1 with 0.3 s between calls took a
median 15.9 ms a call, against 4.2 ms back to back (its serial forms: 8.0). With every
worker pinned to a CPU of its own (the calling thread is never pinned), the same calls took
a median 5.2-6.3 ms. So the first team region a thread is about to start (the first
:meth:`Team.usable` that says True there) pins that thread's team workers first: worker ``j`` (of ``ways``) to the ``j``-th CPU of the
calling thread's affinity mask, the caller left on all of them. Not where the mask has fewer
CPUs than ``ways``, where the user binds OpenMP's threads already (``OMP_PROC_BIND``,
``GOMP_CPU_AFFINITY``), nor with ``LOWERKIT_TEAM_PINNING=0``.

The guard:

A team region (``lowerkit.backend.cpu.jit.team``) is fork-join: the calling thread waits at
its end for every team thread. When another process holds a core, the team thread on that
core runs only when the scheduler gives it a slice, and every region waits for it (measured,
MobileNetV2 batch 1 on the 2-core VM beside one busy process: median 36.7 ms, p90 186 ms,
against 6.4 ms idle). The guard watches whole calls: a call more than :attr:`STALL` times
slower than the best call seen, and at least :attr:`STALL_MIN_SECONDS` slower, stalls;
:attr:`STREAK` stalls in a row switch the handle to
its serial forms, and after :attr:`SERIAL_CALLS` calls (the last one the first back on the
team) the team is tried again. The probe compares the team with the serial calls just
before it: a team call at most as slow as the best of them is good — the team is on again,
and its best call is measured anew (a whole-machine slowdown, which slows both forms, is
not a stall: on a shared VM whose speed moved 2x within minutes, ResNet-18's team calls ran
27-50 ms and its serial ones 45-68, team / serial 0.70 call for call); :attr:`STREAK` bad
probes in a row and the next serial stretch is twice as long (up to
:attr:`MAX_SERIAL_CALLS`); one good probe resets it. (A single slow call is no verdict: the
first call after an idle pause wakes the team's sleeping threads.) On an idle machine the
guard only reads the clock twice a call.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from .cores import pinning_on


class StallGuard:
    """Whether team regions run now (:attr:`on`); :meth:`begin` / :meth:`end` time each call.

    Shared by every thread calling one handle: the counters are plain attributes, updated
    without a lock (a lost update costs at most one call in the wrong mode).
    """

    STALL = 2.0
    # A stalled region waits for a descheduled team thread: a scheduler slice, milliseconds. On
    # calls of tens of microseconds twice the best call is the noise of one interrupt, and
    # counting it held a one-layer module's team off for most of its calls (a 3x3 stride-2
    # depthwise layer 576x14x14 at batch 1: 1979 of 2000 calls on its pool form).
    STALL_MIN_SECONDS = 1e-3
    STREAK = 3
    SERIAL_CALLS = 25
    MAX_SERIAL_CALLS = 800

    def __init__(self) -> None:
        self.on = True
        self.best = float("inf")
        self._streak = 0
        self._serial_left = 0
        self._serial_best = float("inf")  # the best serial call of the current serial stretch
        self._backoff = self.SERIAL_CALLS
        self._probing = False

    def begin(self) -> float:
        """Call before running a call; returns the start time to pass to :meth:`end`."""
        if not self.on:
            self._serial_left -= 1
            if self._serial_left <= 0:  # try the team again
                self.on, self._probing = True, True
        return time.perf_counter()

    def end(self, start: float) -> None:
        """Call after the call; decides the mode of the calls that follow."""
        seconds = time.perf_counter() - start
        if not self.on:
            self._serial_best = min(self._serial_best, seconds)
            return
        if self._probing:
            if seconds <= self._serial_best:  # the team beats the serial forms as things are now
                self._probing, self._backoff, self._streak = False, self.SERIAL_CALLS, 0
                self.best = seconds
                return
        elif seconds <= self.STALL * min(self.best, seconds) or seconds - self.best < self.STALL_MIN_SECONDS:
            self.best = min(self.best, seconds)
            self._streak = 0
            return
        self._streak += 1
        if self._streak >= self.STREAK:
            if self._probing:  # the team stalled again as soon as it came back: wait longer
                self._backoff = min(2 * self._backoff, self.MAX_SERIAL_CALLS)
            self.on, self._probing, self._streak = False, False, 0
            self._serial_left, self._serial_best = self._backoff, float("inf")


@dataclass(frozen=True)
class Team:
    """Kernels bound with a team run each call as one compiled parallel region of ``ways``
    threads (``lowerkit.backend.cpu.jit.team``), with BLAS at one thread. ``sgemm`` is the
    ``cblas_sgemm`` the team GEMMs take (``jit.cblas.sgemm()``: MKL's or numpy's); ``guard``
    (one per handle) turns the regions off while they stall."""

    ways: int
    sgemm: object
    guard: StallGuard

    @staticmethod
    def kernels() -> ModuleType:
        """The team kernel module (compiled or loaded from the cache on first use)."""
        return _kernels[0] if _kernels else _load_kernels()

    def usable(self) -> bool:
        """False while the guard has turned regions off, on a thread inside :func:`team_off`,
        and in a child forked after the parent ran team kernels: run the serial forms then.
        The first True on a thread pins that thread's team workers (:func:`pin_team_workers`)."""
        if not (self.guard.on and not _here.off and not (_layer[0] if _layer else _load_layer()).forked()):
            return False
        if not _here.pinned:
            pin_team_workers(self.ways)
        return True


class _Here(threading.local):
    off = False
    pinned = False  # pin_team_workers ran on this thread


_here = _Here()


@contextmanager
def team_off() -> Iterator[None]:
    """Team regions off on this thread inside the block: every :meth:`Team.usable` there is
    False, so team-bound calls take their serial forms (a team-bound plan run as batch
    slices, each worker on its own images)."""
    before, _here.off = _here.off, True
    try:
        yield
    finally:
        _here.off = before


# Found on first use and kept: these two are asked once per layer per call (an import
# statement there cost ~1 us each, a few percent of a small network's call).
_kernels: list[ModuleType] = []
_layer: list[ModuleType] = []


def _load_kernels() -> ModuleType:
    from . import jit

    module = jit.load("team")
    _kernels[:] = [module]
    return module


def _load_layer() -> ModuleType:
    from .jit import layer  # imported where teams are made, never at this package's import

    _layer[:] = [layer]
    return layer


def make_team(ways: int) -> Team | None:
    """A :class:`Team` of ``ways`` threads with a guard of its own, where team kernels can run
    here; None otherwise (the caller keeps its pool or BLAS forms)."""
    if ways < 2:
        return None
    from .jit.cblas import sgemm
    from .jit.layer import team_ready

    found = sgemm() if team_ready() else None
    return None if found is None else Team(ways, found.function, StallGuard())


def pin_team_workers(ways: int) -> int:
    """Pin the team workers of regions started on this thread, once per thread (later calls
    return 0 at once): worker ``j`` of ``ways`` to the ``j``-th CPU this thread may run on;
    this thread is left as it is. Returns how many workers were pinned: 0 where pinning is
    off (``LOWERKIT_TEAM_PINNING=0``, OpenMP's own binding set, fewer CPUs than ``ways``, no
    ``sched_setaffinity``, team kernels unusable here). The module docstring says why."""
    if _here.pinned:
        return 0
    _here.pinned = True
    if not pinning_on() or os.environ.get("OMP_PROC_BIND") or os.environ.get("GOMP_CPU_AFFINITY"):
        return 0
    layer = _layer[0] if _layer else _load_layer()
    if not layer.team_ready():
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    kernels = Team.kernels()
    if ways < 2 or len(cpus) < ways or kernels.pin_workers is None:
        return 0
    masks = np.zeros((ways, cpus[-1] // 64 + 1), np.uint64)
    for j in range(1, ways):
        masks[j, cpus[j] // 64] = np.uint64(1) << np.uint64(cpus[j] % 64)
    masks.flags.writeable = False
    return int(kernels.pin_workers(masks, kernels.SCHED_SETAFFINITY))
