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


# hardswish/hardsigmoid/silu/gelu run in the epilogues of the compiled kernels (and in place
# on contiguous outputs of the numpy ones); int8 programs keep nodes carrying them in fp32.
ACTIVATIONS = ("relu", "relu6", "clip", "hardswish", "hardsigmoid", "silu", "gelu")


def activation_attrs(node: Node) -> dict:
    """The fused-activation attributes equivalent to activation node ``node``."""
    if node.op == "relu":
        return {"act": "relu"}
    if node.op in ("hardswish", "silu"):
        return {"act": node.op}
    if node.op == "gelu":
        return {"act": "gelu_tanh" if node.attrs.get("approximate", "none") == "tanh" else "gelu"}
    if node.op == "hardsigmoid":
        return {"act": "hardsigmoid", "act_alpha": float(node.attrs.get("alpha", 1 / 6)),
                "act_beta": float(node.attrs.get("beta", 0.5))}
    if node.op == "relu6":
        return {"act": "clip", "act_min": 0.0, "act_max": 6.0}
    return {
        "act": "clip",
        "act_min": float(node.attrs.get("min", float("-inf"))),
        "act_max": float(node.attrs.get("max", float("inf"))),
    }
