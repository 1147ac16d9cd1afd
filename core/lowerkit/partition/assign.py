"""Step 1 of partitioning: give each compute node to the first backend that claims it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..ir.graph import Graph
from ..ir.node import Node

# Ops that carry no computation: they follow the nodes that read them.
FREE_OPS = frozenset({"param", "constant"})

# A backend's answer for one node of a graph (None: the node alone): truthy to claim it, falsy
# (optionally with a reason) to decline.
SupportQuery = Callable[[Node, "Graph | None"], object]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend offered nodes, in priority order.

    ``is_supported`` is None for a backend that takes whole methods only.
    """

    name: str
    is_supported: SupportQuery | None


@dataclass(frozen=True, slots=True)
class Decline:
    backend: str
    reason: str


@dataclass(slots=True)
class Assignment:
    """Per compute node: the backend that took it (None: left un-lowered) and who declined."""

    backend_of: dict[Node, str | None] = field(default_factory=dict)  # node -> backend
    declines: dict[Node, list[Decline]] = field(default_factory=dict)  # node -> declines
    unclaimed: list[Node] = field(default_factory=list)


def decline_reason(answer: object) -> str:
    """The reason a falsy ``is_supported`` answer carries (``Unsupported("...")``), if any."""
    reason = getattr(answer, "reason", None)
    return str(reason) if reason else "not supported"


def assign_backends(
    graph: Graph,
    candidates: Sequence[Candidate],
    selected: Callable[[Node], bool] = lambda node: True,
    with_graph: bool = True,
) -> Assignment:
    """Offer every selected compute node to each candidate in order; the first yes wins.

    With ``with_graph`` each candidate is asked about a node of ``graph`` (its answer may
    depend on the node's neighbours); without, about the node alone.

    A candidate without ``is_supported`` takes the whole method when no earlier candidate
    claimed anything in it, and declines every node otherwise. Nodes that are not
    ``selected`` (selective lowering) stay un-lowered. ``call`` nodes always stay in the
    outer graph: they invoke other methods or submodules.
    """
    result = Assignment()
    context = graph if with_graph else None
    compute = [n for n in graph.nodes if n.op not in FREE_OPS]
    pending: list[Node] = []
    for node in compute:
        if node.op == "call" or not selected(node):
            result.backend_of[node] = None
        else:
            pending.append(node)
            result.declines[node] = []
    for candidate in candidates:
        if not pending:
            break
        if candidate.is_supported is None:
            if len(pending) == len(compute) and all(n.op != "call" for n in compute):
                for node in pending:
                    result.backend_of[node] = candidate.name
                pending = []
            else:
                for node in pending:
                    result.declines[node].append(
                        Decline(candidate.name, "takes whole methods only")
                    )
            continue
        still_pending = []
        for node in pending:
            answer = candidate.is_supported(node, context)
            if answer:
                result.backend_of[node] = candidate.name
            else:
                result.declines[node].append(Decline(candidate.name, decline_reason(answer)))
                still_pending.append(node)
        pending = still_pending
    result.unclaimed = pending
    return result
