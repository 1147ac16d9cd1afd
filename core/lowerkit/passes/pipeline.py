"""Run a list of passes once or to a fixed point, verify the result, trace what changed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import VerificationError
from ..ir import Graph, verify_graph

Pass = Callable[[Graph], bool]


@dataclass(frozen=True, slots=True)
class PassEvent:
    """One pass that changed the graph: its name, the round, node counts before and after."""

    name: str
    round: int
    nodes_before: int
    nodes_after: int

    def __str__(self) -> str:
        return f"round {self.round}: {self.name} ({self.nodes_before} -> {self.nodes_after} nodes)"


def pass_name(p: Pass) -> str:
    """A pass's name: its function name, or its class name for a callable object."""
    return getattr(p, "__name__", type(p).__name__)


def run_passes(
    graph: Graph,
    passes: Sequence[Pass],
    *,
    fixed_point: bool = False,
    max_rounds: int = 10,
    verify: bool = True,
    trace: Callable[[PassEvent], None] | None = None,
) -> list[str]:
    """Run ``passes`` in order on ``graph``; the names of those that changed it, in order.

    With ``fixed_point`` the list is rerun until a whole round changes nothing; a graph still
    changing after ``max_rounds`` rounds raises :class:`~lowerkit.errors.VerificationError`
    (two passes undoing each other). ``verify`` checks the graph (as a free graph, no module)
    once at the end. ``trace`` is called with a :class:`PassEvent` for every pass that fired.
    """
    if max_rounds < 1:
        raise ValueError(f"run_passes: max_rounds must be >= 1, got {max_rounds}")
    fired: list[str] = []
    rounds = max_rounds if fixed_point else 1
    for round_ in range(1, rounds + 1):
        changed = False
        for p in passes:
            before = len(graph.nodes)
            if p(graph):
                changed = True
                fired.append(pass_name(p))
                if trace is not None:
                    trace(PassEvent(pass_name(p), round_, before, len(graph.nodes)))
        if not changed or not fixed_point:
            break
    else:
        names = ", ".join(pass_name(p) for p in passes)
        raise VerificationError(
            f"run_passes: the graph still changed after {max_rounds} rounds of [{names}] "
            f"(do two passes undo each other?)"
        )
    if verify:
        verify_graph(graph)
    return fired
