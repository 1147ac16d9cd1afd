"""``fold_scales``: a per-column constant scale after a fully-connected layer goes into its
weight and bias.

ConvNeXt's blocks end in a layer scale, ``fc2(h) * gamma`` with ``gamma`` one value per
channel: as an instruction of its own, a pass over the block's whole output (ConvNeXt-T at
batch 1: 18 of them, 0.81 ms of its ~50). Since ``(h @ W + b) * g = h @ (W * g) + b * g``
(``g`` scaling W's columns), the product becomes ``glow.fc(h, W * g, b * g)``.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph
from lowerkit.passes import const_value, make_constant

from ._util import single_user


def fold_scales(graph: Graph) -> bool:
    """Fold ``mul(glow.fc(x, W[, b]), g)`` with ``g`` a constant of one value per output column
    (shape [N] or [1, ..., 1, N]) into the fc's constant weight and bias, where the fc has no
    activation and the product is its only reader; True if any changed."""
    changed = False
    for node in list(graph.nodes):
        if node.op != "glow.fc" or node not in graph.nodes or node.attrs.get("act") or node.output.type.dtype != "f32":
            continue
        producers, users = graph.producers(), graph.users()
        mul = single_user(graph, node.output, users)
        if mul is None or mul.op != "mul" or mul.output.type != node.output.type:
            continue
        other = mul.inputs[1] if mul.inputs[0] is node.output else mul.inputs[0]
        scale = const_value(producers.get(other))
        w = const_value(producers.get(node.inputs[1]))
        columns = node.output.type.shape[-1]
        if scale is None or w is None or w.ndim != 2 or scale.dtype != np.float32 or scale.size != columns \
                or scale.ndim > node.output.type.rank or any(d != 1 for d in scale.shape[:-1]):
            continue
        g = scale.reshape(columns)
        bias = const_value(producers.get(node.inputs[2])) if len(node.inputs) > 2 else None
        if len(node.inputs) > 2 and bias is None:
            continue
        at = graph.nodes.index(node)
        inputs = [node.inputs[0], make_constant(graph, w * g, f"{node.inputs[1].name}_scaled", at, node)]
        if bias is not None:
            inputs.append(make_constant(graph, bias.reshape(-1) * g, f"{node.inputs[2].name}_scaled", at, node))
        node.inputs = inputs
        node.outputs = list(mul.outputs)
        graph.nodes.remove(mul)
        changed = True
    return changed
