"""Zero-argument calls: a kernel bound to fixed arrays (``functools.partial`` of it), and
:func:`sequence` to run several as one — for callers that run the same arrays again and
again (``panels.PackedWeight.bind``, ``team_layers.DenseTeamForm.bind``, nnpack's bound steps,
glow_like's bound instructions); :func:`on_team` picks a team form or its serial one per call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Call = Callable[[], object]


def sequence(*calls: Call) -> Call:
    """One call running ``calls`` in order (the single call itself for one)."""
    if len(calls) == 1:
        return calls[0]

    def run() -> None:
        for call in calls:
            call()

    return run


def on_team(team: Any, regions: Call, serial: Call) -> Call:
    """``regions`` while ``team`` (a ``lowerkit.backend.cpu.Team``) can run, else ``serial``
    (decided on every call: the stall guard, batch slices, a forked child)."""
    usable = team.usable

    def run() -> None:
        if usable():
            regions()
        else:
            serial()

    return run
