"""Dead-code elimination: drop nodes none of whose outputs is read (every op is pure)."""

from __future__ import annotations

from ..ir import Graph, Value


def eliminate_dead_code(graph: Graph) -> bool:
    """Remove nodes whose outputs are neither read nor graph outputs; True if any went."""
    live: set[Value] = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept[::-1]
    return changed
