"""Zero-argument calls: a kernel bound to fixed arrays (``functools.partial`` of it), and
:func:`sequence` to run several as one — for callers that run the same arrays again and
again (``panels.PackedWeight.bind``, ``team_layers.DenseTeamForm.bind``, nnpack's bound steps)."""

from __future__ import annotations

from collections.abc import Callable

Call = Callable[[], object]


def sequence(*calls: Call) -> Call:
    """One call running ``calls`` in order (the single call itself for one)."""
    if len(calls) == 1:
        return calls[0]

    def run() -> None:
        for call in calls:
            call()

    return run
