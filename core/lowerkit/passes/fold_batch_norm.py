"""Batch-norm folding: ``batch_norm(conv2d(x, w, b))`` becomes ``conv2d(x, w', b')``.

With s = gamma / sqrt(var + eps): w' = w * s (per output channel), b' = (b - mean) * s + beta.
The same holds for ``linear`` followed by a batch norm over its features (rank-2 output), and
for ``conv_transpose2d``, whose output channels are dim 1 of its ``[in, out / groups, kh, kw]`` weight.
Weights, bias and statistics must be ``constant`` nodes (a backend that specialises to the
module's weights turns ``param`` into ``constant`` first).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from .helpers import const_value, make_constant, single_user


def fold_batch_norm(graph: Graph) -> bool:
    """Fold each batch norm with constant statistics into the conv/linear feeding it."""
    changed = False
    index = 0
    while index < len(graph.nodes):
        node = graph.nodes[index]
        index += 1
        if node.op not in ("conv2d", "linear", "conv_transpose2d") or node.attrs.get("act", "none") != "none":
            continue
        producers, users = graph.producers(), graph.users()
        bn = single_user(graph, node.output, users)
        if bn is None or bn.op != "batch_norm" or bn.inputs[0] is not node.output:
            continue
        if node.op == "linear" and node.output.type.rank != 2:
            continue
        stats = [const_value(producers.get(v)) for v in bn.inputs[1:]]
        weight = const_value(producers.get(node.inputs[1]))
        bias = const_value(producers.get(node.inputs[2])) if len(node.inputs) > 2 else None
        if weight is None or any(s is None for s in stats) or (len(node.inputs) > 2 and bias is None):
            continue
        mean, var, gamma, beta = (np.asarray(s, dtype=np.float64) for s in stats)
        scale = gamma / np.sqrt(var + float(bn.attrs.get("eps", 1e-5)))
        new_w = _scaled_weight(node, weight, scale)
        b = np.zeros_like(mean) if bias is None else bias.astype(np.float64)
        new_b = ((b - mean) * scale + beta).astype(weight.dtype)
        at = graph.nodes.index(node)
        w_val = make_constant(graph, new_w, f"{node.output.name}_w_folded", at, node)
        b_val = make_constant(graph, new_b, f"{node.output.name}_b_folded", at + 1, node)
        node.inputs = [node.inputs[0], w_val, b_val]
        node.outputs = list(bn.outputs)
        graph.nodes.remove(bn)
        index = graph.nodes.index(node) + 1
        changed = True
    return changed


def _scaled_weight(node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The weight with each output channel multiplied by its batch-norm scale."""
    w = weight.astype(np.float64)
    if node.op == "conv_transpose2d":
        groups = int(node.attrs.get("groups", 1))
        ic, ocg = weight.shape[:2]
        grouped = w.reshape(groups, ic // groups, ocg, *weight.shape[2:])
        return (grouped * scale.reshape(groups, 1, ocg, 1, 1)).reshape(weight.shape).astype(weight.dtype)
    return (w * scale.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(weight.dtype)
