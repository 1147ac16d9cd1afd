"""No-op elimination: identity reshapes/flattens/transposes vanish, reshape chains collapse."""

from __future__ import annotations

from ..ir import Graph

_RESHAPES = ("reshape", "flatten")


def eliminate_noop_reshapes(graph: Graph) -> bool:
    """Remove shape-preserving reshapes and identity transposes; collapse reshape chains."""
    changed = False
    producers = graph.producers()
    kept = []
    for node in graph.nodes:
        if node.op in _RESHAPES + ("transpose",) and len(node.inputs) == 1:
            x, y = node.inputs[0], node.output
            identity = (
                tuple(node.attrs.get("perm", ())) == tuple(range(x.type.rank))
                if node.op == "transpose"
                else x.type.shape == y.type.shape
            )
            if identity and x.type == y.type:
                graph.replace_all_uses(y, x)
                changed = True
                continue
            source = producers.get(x)
            if node.op in _RESHAPES and source is not None and source.op in _RESHAPES:
                # reshape(reshape(z)) == reshape(z): read z, state the final shape.
                node.op = "reshape"
                node.inputs = [source.inputs[0]]
                node.attrs = {"shape": tuple(y.type.shape)}
                changed = True
        kept.append(node)
    graph.nodes = kept
    return changed
