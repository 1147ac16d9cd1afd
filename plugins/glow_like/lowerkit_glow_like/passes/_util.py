"""Small queries glow_like's fusion passes share (``single_user`` lives in the core)."""

from __future__ import annotations

from lowerkit.ir import Node
from lowerkit.passes import single_user

__all__ = ["ACTIVATIONS", "activation_attrs", "single_user"]

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
