"""Constant folding: evaluate, at preprocess time, every node whose inputs are all constant.

Parameters are constants here (the payload is specialised to the module's weights), so
e.g. a weight transpose or a scale computed from batch-norm statistics is folded away.
"""

from __future__ import annotations

from lowerkit.ir import Graph

from .._graph import run_node


def fold_constants(graph: Graph) -> bool:
    """Turn all-constant-input nodes into ``constant`` nodes; True if any was folded."""
    changed = False
    constant: dict[int, object] = {}
    for node in graph.nodes:
        if node.op == "constant":
            constant[id(node.output)] = node.attrs["value"]
            continue
        if not node.inputs or node.op == "call" or not all(id(v) in constant for v in node.inputs):
            continue
        results = run_node(node, [constant[id(v)] for v in node.inputs])
        if len(results) != 1:
            continue
        array = results[0].copy()
        array.flags.writeable = False
        node.op, node.inputs, node.attrs = "constant", [], {"value": array}
        constant[id(node.output)] = array
        changed = True
    return changed
