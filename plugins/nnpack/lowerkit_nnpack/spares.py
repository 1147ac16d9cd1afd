"""Where a plan's steps write their outputs: buffers of values that died, then a planned arena.

A call's steps run in the same order with the same shapes every time. So :class:`Spares`
records one call — when each buffer a step wrote was taken and when its value died — and
from the next call on gives every such buffer a fixed offset in one arena, packed by those
lifetimes (as glow_like's memory plan packs its buffers). The arena touches about the peak of
live bytes a call; reusing whole freed buffers had touched every size the network makes
(EfficientNet-B0: 21 buffers, 12.9 MB a call, against glow_like's 6.0 MB arena), and the
layers paid for the memory traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from math import prod
from typing import NamedTuple

import numpy as np

from lowerkit.backend.cpu import aligned_empty, pack_lifetimes, recycled_buffer

__all__ = ["Bound", "Spares", "plan_offsets"]

class Bound(NamedTuple):
    """A step's bound call and the arrays it was bound to (``Spares.bound``)."""

    inputs: tuple[np.ndarray, ...]  # what the step read, in its order (the map first)
    outputs: tuple[np.ndarray, ...]  # what the step returns: its takes' arrays, in order (or its input, in place)
    call: Callable[[], object] | None  # None: the arrays came once; bound the second time
    first_take: int  # the call's takes before the step's first
    arena: np.ndarray | None  # the arena its outputs view (Spares.arena_in_use), else None
    takes: int  # how many arrays the step takes from the spares


# A buffer of a value that died: (byte buffer of recycled_buffer (aligned_buffer's kind), where its aligned part begins,
# its aligned bytes).
_Entry = tuple[np.ndarray, int, int]


class Spares:
    """Output buffers for one thread's calls of a plan (:meth:`Plan._spares` keeps one per
    thread across calls).

    - The first call (and any call after the take sequence changed): a step writes into the
      most recently freed buffer that holds it (at most twice its size), else into a new one.
      Only buffers this plan's steps filled are taken back — never the caller's inputs, the
      constants, nor a view of someone else's array — and never while a live value shares
      their memory, nor one the call returns. That call is recorded.
    - Later calls: each recorded buffer whose value died within the call is a view of the
      arena at its planned offset (:func:`plan_offsets`); the others (a returned output, a
      buffer a live view held) still come from the freed buffers. A take whose size differs
      from the recording drops the plan: the rest of the call runs as the first did, and is
      recorded for a new plan.

    Every buffer starts on a cache line (:func:`aligned_empty`: numpy's own large arrays do
    not, and MKL's AVX-512 GEMM writing MobileNetV2's 24 -> 144 expansion at 56x56 took 94 us
    into numpy's array, 84 us into an aligned one); steady-state calls touch no fresh pages
    (a fresh 1.6 MB output cost ~25-35 us a layer in page faults).
    """

    __slots__ = ("_free", "_owned", "_lent", "_log", "_recording", "_clock", "taken", "_slots", "_arena", "_views",
                 "tracking", "bound", "chains", "destinations", "into")
    # Freed buffers kept, the least recently freed dropped first: at 8, EfficientNet-B0
    # allocated 32 fresh maps a call (1-5 MB each, in page faults); from 32 no zoo model did.
    MAX_FREE = 32

    def __init__(self) -> None:
        self._free: list[_Entry] = []  # oldest first
        # id(array) -> (the array, its buffer's entry, its take in the log): lent by take,
        # then owned by a live value
        self._owned: dict[int, tuple[np.ndarray, _Entry, int]] = {}
        self._lent: dict[int, tuple[np.ndarray, _Entry, int]] = {}
        self._log: list[list] = []  # per take of the recorded call: [bytes, taken at, freed at or None]
        self._recording = False  # this call runs without a plan from its first take: log it
        self._clock = 0  # takes and frees so far in this call
        self.taken = 0  # takes so far in this call
        self._slots: list[tuple[int, int] | None] | None = None  # per take: (bytes, arena offset)
        self._arena: np.ndarray | None = None
        self._views: list[np.ndarray | None] = []  # per take: its arena view, made on first use
        # Whether :meth:`produced` or :meth:`died` can do anything in this call: a take has lent
        # a buffer. Steady-state calls take arena views, which nobody tracks: the plan's loop
        # then skips both calls.
        self.tracking = False
        # This thread's bound calls (see .bound), by step (a :class:`Bound` each). A call is
        # used only while its step sees the same array objects again — arena views from the
        # second call on — and holds them, and the arena they view, until replaced.
        self.bound: dict[int, Bound] = {}
        # This thread's runs of bound steps (``chains.build_chains``), made after a call that
        # replayed bound steps; None until then, and again after one stopped replaying.
        self.chains: tuple | None = None
        # Where this call's outputs go, by value slot (``Plan._run_part``: a part's rows of the
        # joined result), or None; and, for the step now running, where each of its takes goes
        # in order (None: a spare as usual), set by the plan's loop from ``destinations``.
        self.destinations: dict[int, np.ndarray] | None = None
        self.into: list[np.ndarray | None] | None = None

    def start_call(self) -> None:
        """A new call: only arrays this call's steps produce count as owned. A call recorded
        before becomes the arena plan."""
        self._owned.clear()
        self._lent.clear()
        self.tracking = False
        if self._slots is None and self._log:
            self._slots, size = plan_offsets(self._log)
            self._views = [None] * len(self._slots)
            if size:
                self._arena = aligned_empty(size, np.uint8)
                self._free.clear()  # the arena holds what they held
            # (A call none of whose buffers die keeps this plan of no arena slots: planned
            # again at every call, a one-layer module's image-by-image form spent ~8 us an image.)
        self._log = []
        self._recording = self._slots is None
        self._clock = self.taken = 0

    def arena_in_use(self) -> np.ndarray | None:
        """The arena every take of this call so far came from, or None (no plan yet, or a
        take fell back to the freed buffers): what a :class:`Bound` records as its ``arena``."""
        return None if self.tracking else self._arena

    def replays(self, entry: Bound) -> bool:
        """Whether the step bound in ``entry`` would take the same arena views now: this
        call's plan is the one it was bound under and has made as many takes before it. Its
        inputs the plan checks (see ``Plan._run_steps``)."""
        return entry.arena is not None and entry.arena is self._arena and entry.first_take == self.taken

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A float32 C-contiguous, cache-line-aligned array of ``shape`` in memory nobody
        reads any more (a new one where no spare buffer holds it) — or, where the plan's loop
        set :attr:`into` for this take, that place of the call's result."""
        nbytes = 4 * prod(shape)
        k, self.taken = self.taken, self.taken + 1
        self._clock += 1
        slots = self._slots
        place = self.into.pop(0) if self.into else None
        if place is not None and place.shape == shape and place.dtype == np.float32 and place.flags.c_contiguous:
            # A call output's place: never freed within the call, so never an arena slot
            if slots is not None and (k >= len(slots) or slots[k] is not None):
                self._slots, self._arena, self._views = None, None, []
            if self._recording:
                self._log.append([nbytes, self._clock, None])
            return place
        if slots is not None:
            slot = slots[k] if k < len(slots) else None
            if slot is not None and slot[0] == nbytes:
                view = self._views[k]  # the same array every call: no slicing on the hot path
                if view is None or view.shape != shape:
                    view = self._views[k] = self._arena[slot[1]:slot[1] + nbytes].view(np.float32).reshape(shape)
                return view
            if slot is not None or k >= len(slots):  # not the recorded sequence: the next call records anew
                self._slots, self._arena, self._views = None, None, []
        array, entry = self._reuse(shape, nbytes)
        if self._recording:
            self._log.append([nbytes, self._clock, None])
        self._lent[id(array)] = (array, entry, len(self._log) - 1 if self._recording else -1)
        self.tracking = True
        return array

    def _reuse(self, shape: tuple[int, ...], nbytes: int) -> tuple[np.ndarray, _Entry]:
        """The most recently freed buffer that holds ``nbytes`` (at most twice as large: the
        bigger ones stay for bigger values), else a new one; as an array of ``shape``."""
        free = self._free
        for i in range(len(free) - 1, -1, -1):
            entry = free[i]
            if nbytes <= entry[2] <= 2 * nbytes:
                del free[i]
                begin = entry[1]
                return entry[0][begin:begin + nbytes].view(np.float32).reshape(shape), entry
        # A value the call returns lands here too: from 32 MiB up on a recycled buffer
        # (lowerkit.backend.cpu.recycle), not on pages the kernel must zero at every call.
        buffer, begin = recycled_buffer(nbytes)
        return np.ndarray(shape, np.float32, buffer, begin), (buffer, begin, nbytes)

    def produced(self, arrays: list[np.ndarray]) -> None:
        """A step's results: one owns its buffer if :meth:`take` gave it from the freed
        buffers. (Nothing else: an array a step made some other way may be a view of the
        caller's input; arena arrays need no owner.)"""
        for array in arrays:
            lent = self._lent.pop(id(array), None)
            if lent is not None and lent[0] is array:
                self._owned[id(array)] = lent

    def died(self, array: np.ndarray, live: Iterable[np.ndarray | None]) -> None:
        """``array``'s value is dead: keep its buffer for reuse if this call's steps filled it
        and no array of ``live`` (the call's live values, constants apart; None for a free
        slot) shares it. (Each buffer is lent to one array, owned by one value: it cannot be
        freed twice.)"""
        owned = self._owned.pop(id(array), None)
        if owned is None or owned[0] is not array:
            return
        entry = owned[1]
        buffer = entry[0]
        for v in live:  # views of a buffer have it as their base
            if v is array:  # the same array lives on as another value (a step wrote in place)
                self._owned[id(array)] = owned
                return
            if v is not None and v.base is buffer:
                return
        self._clock += 1
        if owned[2] >= 0:
            self._log[owned[2]][2] = self._clock
        self._free.append(entry)
        if len(self._free) > self.MAX_FREE:
            del self._free[0]


def plan_offsets(log: list[list]) -> tuple[list[tuple[int, int] | None], int]:
    """Arena offsets for a recorded call: ``log`` has per take ``[bytes, taken at, freed at
    or None]`` (one clock over takes and frees). Takes freed within the call get ``(bytes,
    offset)``, placed as glow_like places its buffers (``lowerkit.backend.cpu.pack_lifetimes``:
    cache-line-aligned, no take overlapping one alive at the same time); the others ``None``.
    Returns the slots and the arena's bytes."""
    dying = [i for i, entry in enumerate(log) if entry[2] is not None]
    # alive from its take up to, not including, its free: the clock never repeats a time
    offsets, top = pack_lifetimes([(log[i][1], log[i][2] - 1, log[i][0]) for i in dying])
    slots: list[tuple[int, int] | None] = [None] * len(log)
    for i, offset in zip(dying, offsets):
        slots[i] = (log[i][0], offset)
    return slots, top
