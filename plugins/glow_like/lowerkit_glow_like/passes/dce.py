"""Dead-code elimination: drop nodes none of whose outputs is read (every op is pure)."""

from __future__ import annotations

from lowerkit.ir import Graph


def eliminate_dead_code(graph: Graph) -> bool:
    """Remove nodes whose outputs are neither read nor graph outputs; True if any went."""
    live = {id(v) for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(id(v) in live for v in node.outputs):
            kept.append(node)
            live.update(id(v) for v in node.inputs)
    changed = len(kept) != len(graph.nodes)
    graph.nodes = kept[::-1]
    return changed
