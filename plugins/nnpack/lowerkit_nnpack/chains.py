"""Runs of a plan's bound steps replayed as one loop of calls.

In steady state most steps replay a bound call (see :mod:`.bound`): the plan's loop checks,
step by step, that the step would take the same arena views and reads the arrays it was
bound to, then calls it and moves the step's arrays through the call's value list. A
:class:`Chain` does those checks once for a run of consecutive bound steps — the arena, the
take count at its start, and the arrays it reads from before the run — then makes the run's
calls back to back and leaves the value list as the steps would have. The steps inside the
run hand each other the same arena views every call (checked when the chain is built), so
nothing between them needs checking. (MobileNetV3-Small at batch 1 runs 55 bound steps a
call; ``[nnpack, glow_like]`` / glow_like there, paired calls, went from 1.07-1.08 to
1.02-1.04 with chains: ``benchmarks/mixed_plan.py``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .spares import Bound, Spares

# Shorter runs gain less than their checks cost.
MIN_STEPS = 2


@dataclass(frozen=True, eq=False)
class Chain:
    """Steps ``start`` to ``stop`` (exclusive) of a plan as one run of bound calls."""

    start: int
    stop: int
    calls: tuple[Callable[[], object], ...]
    arena: np.ndarray  # the spares' arena every call's arrays view
    first_take: int  # the call's takes before the run
    takes: int  # the run's takes
    outside: tuple[tuple[int, np.ndarray], ...]  # (slot, array) the run reads from before it
    sets: tuple[tuple[int, np.ndarray], ...]  # (slot, array) alive after the run
    clears: tuple[int, ...]  # slots whose values die in the run

    def holds(self, values: list, spares: Spares) -> bool:
        """Whether the run replays now: the same arena, as many takes before it, no take of
        this call fell back to the freed buffers, and the values it reads from outside it are
        the arrays it was bound to."""
        if spares.arena_in_use() is not self.arena or spares.taken != self.first_take:
            return False
        for slot, array in self.outside:
            if values[slot] is not array:
                return False
        return True

    def finish(self, values: list, spares: Spares) -> None:
        """After the run's calls: the takes they stand for, and the value list as the steps
        would have left it."""
        spares.taken += self.takes
        for slot, array in self.sets:
            values[slot] = array
        for slot in self.clears:
            values[slot] = None


def build_chains(steps: Sequence, bound: dict[int, Bound], arena: np.ndarray) -> tuple[Chain, ...]:
    """The plan's runs of at least :data:`MIN_STEPS` consecutive steps whose bound calls (in
    ``bound``, this thread's ``Spares.bound``) were made on ``arena``, each taking right after
    the one before and reading what the run wrote as the arrays it was bound to — in order."""
    chains: list[Chain] = []
    run: list[tuple[int, Bound]] = []
    written: dict[int, np.ndarray] = {}  # slot -> the array the run's steps wrote there
    for i, step in enumerate(steps):
        entry = None if step.key is None else bound.get(step.key)
        usable = entry is not None and entry.call is not None and entry.arena is arena
        if run and not (usable and entry.first_take == run[-1][1].first_take + run[-1][1].takes
                        and all(written.get(slot, array) is array for slot, array in zip(step.reads, entry.inputs))):
            chains.extend(_chain(steps, run))
            run, written = [], {}
        if usable:
            run.append((i, entry))
            written.update(zip(step.writes, entry.outputs))
    chains.extend(_chain(steps, run))
    return tuple(chains)


def _chain(steps: Sequence, run: list[tuple[int, Bound]]) -> list[Chain]:
    """``run`` as a :class:`Chain` (none for a run shorter than :data:`MIN_STEPS`)."""
    if len(run) < MIN_STEPS:
        return []
    written: dict[int, np.ndarray] = {}
    outside: dict[int, np.ndarray] = {}
    dead: set[int] = set()
    for i, entry in run:
        step = steps[i]
        for slot, array in zip(step.reads, entry.inputs):
            if slot not in written:
                outside.setdefault(slot, array)
        written.update(zip(step.writes, entry.outputs))
        dead.update(step.frees)
    first = run[0][1]
    return [Chain(
        start=run[0][0], stop=run[-1][0] + 1, calls=tuple(entry.call for _, entry in run), arena=first.arena,
        first_take=first.first_take, takes=sum(entry.takes for _, entry in run), outside=tuple(outside.items()),
        sets=tuple((slot, array) for slot, array in written.items() if slot not in dead), clears=tuple(sorted(dead)),
    )]
