"""Small queries glow_like's fusion passes share (``single_user`` lives in the core)."""

from __future__ import annotations

from lowerkit.ir import Node
from lowerkit.passes import single_user

__all__ = ["ACTIVATIONS", "activation_attrs", "single_user"]

# hardswish/hardsigmoid/silu/gelu/sigmoid run in the epilogues of the compiled kernels (and in
# place on contiguous outputs of the numpy ones); int8 programs keep nodes carrying them in fp32.
# (sigmoid: the squeeze-excitation gates of EfficientNet and MobileNetV3, after a 1x1 conv.)
ACTIVATIONS = ("relu", "relu6", "clip", "hardswish", "hardsigmoid", "silu", "gelu", "sigmoid")


def activation_attrs(node: Node) -> dict:
    """The fused-activation attributes equivalent to activation node ``node``."""
    if node.op == "relu":
        return {"act": "relu"}
    if node.op in ("hardswish", "silu", "sigmoid"):
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
