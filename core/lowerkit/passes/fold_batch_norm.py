"""Batch-norm folding: ``batch_norm(conv2d(x, w, b))`` becomes ``conv2d(x, w', b')``.

With s = gamma / sqrt(var + eps): w' = w * s (per output channel), b' = (b - mean) * s + beta.
The same holds for ``linear`` followed by a batch norm over its features (rank-2 output), and
for ``conv_transpose2d``, whose output channels are dim 1 of its ``[in, out / groups, kh, kw]`` weight.
Weights, bias and statistics must be ``constant`` nodes (a backend that specialises to the
module's weights turns ``param`` into ``constant`` first).

A batch norm of a channel concatenation of convolutions — ``batch_norm(concat([conv2d(x1),
conv2d(x2), ...], dim=1))``, each convolution read by the concatenation alone: MixNet's mixed
depthwise kernels — folds its slice of channels into each convolution, and the
concatenation takes the batch norm's place.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from .helpers import const_value, make_constant, single_user


def fold_batch_norm(graph: Graph) -> bool:
    """Fold each batch norm with constant statistics into the conv/linear/transposed conv
    feeding it, or into the convolutions of the channel concatenation feeding it."""
    changed = False
    index = 0
    while index < len(graph.nodes):
        node = graph.nodes[index]
        index += 1
        if node.op == "concat" and _fold_through_concat(graph, node):
            index = graph.nodes.index(node) + 1
            changed = True
            continue
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
        scale, shift = _scale_and_shift(bn, stats)
        _fold_into(graph, node, weight, bias, scale, shift)
        node.outputs = list(bn.outputs)
        graph.nodes.remove(bn)
        index = graph.nodes.index(node) + 1
        changed = True
    return changed


def _scale_and_shift(bn, stats) -> tuple[np.ndarray, np.ndarray]:
    """The batch norm as ``y = x * scale + shift`` per channel (float64)."""
    mean, var, gamma, beta = (np.asarray(s, dtype=np.float64) for s in stats)
    scale = gamma / np.sqrt(var + float(bn.attrs.get("eps", 1e-5)))
    return scale, beta - mean * scale


def _fold_into(graph: Graph, node, weight: np.ndarray, bias: np.ndarray | None, scale: np.ndarray,
               shift: np.ndarray) -> None:
    """``node``'s weight and bias replaced by constants with ``x * scale + shift`` folded in."""
    new_w = _scaled_weight(node, weight, scale)
    b = np.zeros_like(scale) if bias is None else bias.astype(np.float64)
    new_b = (b * scale + shift).astype(weight.dtype)
    at = graph.nodes.index(node)
    w_val = make_constant(graph, new_w, f"{node.output.name}_w_folded", at, node)
    b_val = make_constant(graph, new_b, f"{node.output.name}_b_folded", at + 1, node)
    node.inputs = [node.inputs[0], w_val, b_val]


def _fold_through_concat(graph: Graph, concat) -> bool:
    """Fold the batch norm reading ``concat`` (over channels) into the convolutions it
    concatenates; False, the graph unchanged, where the pattern does not hold."""
    producers, users = graph.producers(), graph.users()
    bn = single_user(graph, concat.output, users)
    if bn is None or bn.op != "batch_norm" or bn.inputs[0] is not concat.output or concat.output.type.rank != 4:
        return False
    if int(concat.attrs.get("dim", 0)) % 4 != 1 or len(set(concat.inputs)) != len(concat.inputs):
        return False
    stats = [const_value(producers.get(v)) for v in bn.inputs[1:]]
    if any(s is None for s in stats):
        return False
    folds = []
    for value in concat.inputs:
        conv = producers.get(value)
        if (conv is None or conv.op != "conv2d" or conv.attrs.get("act", "none") != "none"
                or single_user(graph, value, users) is not concat):
            return False
        weight = const_value(producers.get(conv.inputs[1]))
        bias = const_value(producers.get(conv.inputs[2])) if len(conv.inputs) > 2 else None
        if weight is None or (len(conv.inputs) > 2 and bias is None):
            return False
        if not isinstance(value.type.shape[1], int):
            return False
        folds.append((conv, weight, bias, value.type.shape[1]))
    scale, shift = _scale_and_shift(bn, stats)
    start = 0
    for conv, weight, bias, channels in folds:
        part = slice(start, start + channels)
        _fold_into(graph, conv, weight, bias, scale[part], shift[part])
        start += channels
    concat.outputs = list(bn.outputs)
    graph.nodes.remove(bn)
    return True


def _scaled_weight(node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The weight with each output channel multiplied by its batch-norm scale."""
    w = weight.astype(np.float64)
    if node.op == "conv_transpose2d":
        groups = int(node.attrs.get("groups", 1))
        ic, ocg = weight.shape[:2]
        grouped = w.reshape(groups, ic // groups, ocg, *weight.shape[2:])
        return (grouped * scale.reshape(groups, 1, ocg, 1, 1)).reshape(weight.shape).astype(weight.dtype)
    return (w * scale.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(weight.dtype)
