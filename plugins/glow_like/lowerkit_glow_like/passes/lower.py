"""Lowering: rewrite high-level ops into the smaller low-level set the fuser and kernels use.

linear -> matmul(x, W^T) + add(bias); batch_norm (constant statistics) -> mul + add with
per-channel constants; relu6 -> clip(0, 6); flatten -> reshape.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, Node, TensorType
from lowerkit.passes import const_value, make_constant



def _replace(graph: Graph, node: Node, new_nodes: list[Node]) -> None:
    at = graph.nodes.index(node)
    graph.nodes[at : at + 1] = new_nodes


def _new(graph: Graph, op, inputs, out_type, attrs, hint, like: Node) -> Node:
    node = graph.add_node(op, inputs, [out_type], attrs, output_hints=[hint], debug_handle=like.debug_handle,
                          scope=like.scope, source=like.source)
    graph.nodes.pop()  # placed by the caller
    return node


def _lower_linear(graph: Graph, node: Node, producers) -> bool:
    x, w = node.inputs[0], node.inputs[1]
    out = node.output
    weight = const_value(producers.get(w))
    at = graph.nodes.index(node)
    if weight is not None:
        wt = make_constant(graph, np.ascontiguousarray(weight.T), f"{w.name}_t", at, node)
        pre = []
    else:
        t = _new(graph, "transpose", [w], TensorType(w.type.dtype, w.type.shape[::-1]), {"perm": (1, 0)},
                 f"{w.name}_t", node)
        wt, pre = t.output, [t]
    if len(node.inputs) > 2:
        mm = _new(graph, "matmul", [x, wt], out.type, {}, f"{out.name}_mm", node)
        add = Node("add", [mm.output, node.inputs[2]], [out], {}, node.debug_handle, node.scope, node.source)
        _replace(graph, node, pre + [mm, add])
    else:
        mm = Node("matmul", [x, wt], [out], {}, node.debug_handle, node.scope, node.source)
        _replace(graph, node, pre + [mm])
    return True


def _lower_batch_norm(graph: Graph, node: Node, producers) -> bool:
    stats = [const_value(producers.get(v)) for v in node.inputs[1:]]
    if any(s is None for s in stats):
        return False
    mean, var, gamma, beta = (np.asarray(s, dtype=np.float64) for s in stats)
    x, out = node.inputs[0], node.output
    scale = gamma / np.sqrt(var + float(node.attrs.get("eps", 1e-5)))
    shift = beta - mean * scale
    shape = (-1,) + (1,) * (x.type.rank - 2)
    dtype = x.type.numpy_dtype
    at = graph.nodes.index(node)
    s = make_constant(graph, scale.reshape(shape).astype(dtype), f"{out.name}_scale", at, node)
    b = make_constant(graph, shift.reshape(shape).astype(dtype), f"{out.name}_shift", at + 1, node)
    mul = _new(graph, "mul", [x, s], x.type, {}, f"{out.name}_scaled", node)
    add = Node("add", [mul.output, b], [out], {}, node.debug_handle, node.scope, node.source)
    _replace(graph, node, [mul, add])
    return True


def lower_high_level(graph: Graph) -> bool:
    """Rewrite linear, batch_norm, relu6 and flatten into low-level ops; True if any was."""
    changed = False
    for node in list(graph.nodes):
        producers = graph.producers()
        if node.op == "linear":
            changed |= _lower_linear(graph, node, producers)
        elif node.op == "batch_norm":
            changed |= _lower_batch_norm(graph, node, producers)
        elif node.op == "relu6":
            node.op, node.attrs = "clip", {"min": 0.0, "max": 6.0}
            changed = True
        elif node.op == "flatten":
            node.op, node.attrs = "reshape", {"shape": tuple(node.output.type.shape)}
            changed = True
    return changed
