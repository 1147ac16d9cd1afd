"""Common-subexpression elimination: one node per (op, inputs, attributes, output types).

Constants compare by array identity, or by content when small (scalars from front ends).
The ``param`` attribute (which parameter a constant came from) does not take part.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Value

_SMALL = 256  # bytes; larger constants are compared by identity only


def _attr_key(value):
    if isinstance(value, np.ndarray):
        if value.nbytes <= _SMALL:
            return ("tensor", value.dtype.str, value.shape, value.tobytes())
        return ("array", id(value))  # arrays do not hash; the node holds it, so the id is live
    return value


def eliminate_common_subexpressions(graph: Graph) -> bool:
    """Replace a node equal to an earlier one by that one's outputs; True if any did."""
    seen: dict[tuple, list[Value]] = {}
    kept = []
    changed = False
    for node in graph.nodes:
        key = (
            node.op,
            tuple(node.inputs),
            tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items() if k != "param")),
            tuple(v.type for v in node.outputs),
        )
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node.outputs
            kept.append(node)
            continue
        for old, new in zip(node.outputs, earlier):
            graph.replace_all_uses(old, new)
        changed = True
    graph.nodes = kept
    return changed
