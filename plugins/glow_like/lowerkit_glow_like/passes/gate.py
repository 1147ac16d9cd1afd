"""``fold_gates``: a per-channel gate applied to a 1x1 convolution's input goes into the
convolution's weight instead.

Squeeze-and-excitation blocks (EfficientNet, MobileNetV3, MixNet) end with
``conv1x1(x * gate)`` where ``gate`` is ``[N, C, 1, 1]``: the product is a full pass over
the activation ``x`` (written once, read once more by the convolution). Since
``W @ (x * g) = (W * g^T) @ x`` for each image, the pair becomes one
``glow.gated_conv2d(x, W, bias, gate)`` that scales the ``[OC, C]`` weight by the image's
gate (OC*C multiplies) and runs the GEMM on ``x`` itself — where that is the cheaper side:
only when OC < H*W (EfficientNet-B0's 7x7 layers, OC 192-320 against 49 pixels, keep the
product).
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph
from lowerkit.passes import const_value, make_constant

from ._util import single_user


def _pointwise(node) -> bool:
    a = node.attrs
    return (
        tuple(node.inputs[1].type.shape[2:]) == (1, 1)
        and tuple(a.get("stride", (1, 1))) == (1, 1)
        and not any(a.get("padding", (0, 0, 0, 0)))
        and int(a.get("groups", 1)) == 1
        and a.get("algo") is None
    )


def fold_gates(graph: Graph) -> bool:
    """Turn ``conv1x1(mul(x, gate[N, C, 1, 1]))`` with a constant weight into one
    ``glow.gated_conv2d``; True if any changed."""
    changed = False
    for node in list(graph.nodes):
        if node.op not in ("conv2d", "glow.conv2d") or node not in graph.nodes or len(node.inputs) < 2:
            continue
        producers, users = graph.producers(), graph.users()
        mul = producers.get(node.inputs[0])
        if mul is None or mul.op != "mul" or len(node.inputs[1].type.shape) != 4 or not _pointwise(node):
            continue
        if const_value(producers.get(node.inputs[1])) is None or node.output.type.dtype != "f32":
            continue
        if single_user(graph, mul.output, users) is not node:
            continue
        x_type = node.inputs[0].type
        n, c = x_type.shape[0], x_type.shape[1]
        picked = [(a, g) for a, g in (mul.inputs, mul.inputs[::-1])
                  if a.type == x_type and tuple(g.type.shape) == (n, c, 1, 1) and g.type.dtype == "f32"]
        oc = node.inputs[1].type.shape[0]
        if not picked or oc >= x_type.shape[2] * x_type.shape[3]:
            continue  # scaling the [OC, C] weight would cost more than the [C, H*W] product
        x, gate = picked[0]
        if const_value(producers.get(gate)) is not None:
            continue  # gates are activations (a constant one would be a plain weight scale)
        if len(node.inputs) > 2:
            bias = node.inputs[2]
        else:
            bias = make_constant(graph, np.zeros(oc, np.float32), f"{node.output.name}_zero_bias",
                                 graph.nodes.index(node), node)
        node.op = "glow.gated_conv2d"
        node.inputs = [x, node.inputs[1], bias, gate]
        graph.nodes.remove(mul)
        changed = True
    return changed
