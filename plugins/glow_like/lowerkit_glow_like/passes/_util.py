"""Small queries passes share."""

from __future__ import annotations

from lowerkit.ir import Graph, Node, Value


def single_user(graph: Graph, value: Value, users: dict[int, list[Node]]) -> Node | None:
    """The only node reading ``value``, if exactly one does and it is not a graph output."""
    readers = users.get(id(value), [])
    if len(readers) != 1 or any(v is value for v in graph.outputs):
        return None
    if sum(1 for v in readers[0].inputs if v is value) != 1:
        return None
    return readers[0]


ACTIVATIONS = ("relu", "relu6", "clip")


def activation_attrs(node: Node) -> dict:
    """The fused-activation attributes equivalent to activation node ``node``."""
    if node.op == "relu":
        return {"act": "relu"}
    if node.op == "relu6":
        return {"act": "clip", "act_min": 0.0, "act_max": 6.0}
    return {
        "act": "clip",
        "act_min": float(node.attrs.get("min", float("-inf"))),
        "act_max": float(node.attrs.get("max", float("inf"))),
    }
