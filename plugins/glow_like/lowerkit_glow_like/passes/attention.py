"""``fuse_packed_attention``: attention over a transformer's packed projections as one
``glow.packed_attention`` instruction that reads q, k and v where the projection wrote them.

ViT, DeiT and Swin project every token's q, k and v with one fully-connected layer, then
take them apart::

    qkv = reshape(fc(x), [B, L, 3, H, E])
    q, k, v = split(qkv, dim=2)                     # each [B, L, 1, H, E]
    q = transpose(reshape(q, [B, L, H, E]), (0, 2, 1, 3))   # [B, H, L, E]; k, v alike
    out = transpose(sdpa(q, k, v[, mask]), (0, 2, 1, 3))    # [B, L, H, E]

Every split and transpose there is a copy: DeiT-Tiny at batch 8 spent 0.88 of its 9.2 ms a
block on them, Swin-T 58 of its 391 ms (Xeon, ``benchmarks/model.py --instructions``). The
pass makes the whole group one ``glow.packed_attention(qkv[, mask])`` -> ``out``, whose
kernel gives each head's products its operands' row strides instead.
"""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, Node, Value

from ._util import single_user

_HEADS_FIRST = (0, 2, 1, 3)  # [B, L, H, E] <-> [B, H, L, E]


def fuse_packed_attention(graph: Graph) -> bool:
    """Replace each split-transpose-attention-transpose group (see the module) with one
    ``glow.packed_attention``; True if any changed."""
    changed = False
    for node in list(graph.nodes):
        if node.op == "scaled_dot_product_attention" and node in graph.nodes:
            group = _group(graph, node)
            if group is not None:
                _replace(graph, *group)
                changed = True
    return changed


def _group(graph: Graph, sdpa: Node) -> tuple[Node, list[Node], Node] | None:
    """(the split, the nodes between it and the attention's output transpose, that transpose)
    where ``sdpa`` is the middle of the pattern, else None."""
    if len(sdpa.inputs) not in (3, 4) or sdpa.attrs.get("is_causal", False) or sdpa.output.type.dtype != "f32":
        return None
    producers, users = graph.producers(), graph.users()
    split, between = None, []
    for position, operand in enumerate(sdpa.inputs[:3]):
        transpose = producers.get(operand)
        if not _heads_transpose(transpose) or single_user(graph, operand, users) is not sdpa:
            return None
        reshape = producers.get(transpose.inputs[0])
        if reshape is None or reshape.op != "reshape" or single_user(graph, reshape.output, users) is not transpose:
            return None
        source = producers.get(reshape.inputs[0])
        if source is None or source.op != "split" or (split is not None and source is not split):
            return None
        split = source
        part = reshape.inputs[0]
        if split.outputs[position] is not part or single_user(graph, part, users) is not reshape:
            return None
        between += [reshape, transpose]
    packed = split.inputs[0].type
    if (packed.dtype != "f32" or len(packed.shape) != 5 or packed.shape[2] != 3
            or int(split.attrs.get("dim", 0)) % 5 != 2 or tuple(split.attrs.get("sizes", ())) != (1, 1, 1)):
        return None
    b, length, _, heads, depth = packed.shape
    if any(tuple(r.output.type.shape) != (b, length, heads, depth) for r in between[::2]):
        return None
    if len(sdpa.inputs) == 4 and not _fits_scores(sdpa.inputs[3].type.shape, (b, heads, length, length)):
        return None
    back = single_user(graph, sdpa.output, users)
    if not _heads_transpose(back):
        return None
    return split, [*between, sdpa], back


def _fits_scores(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether a mask of shape ``mask`` broadcasts to the scores' shape without widening it."""
    try:
        return np.broadcast_shapes(tuple(mask), scores) == scores
    except ValueError:
        return False


def _heads_transpose(node: Node | None) -> bool:
    return node is not None and node.op == "transpose" and tuple(node.attrs.get("perm", ())) == _HEADS_FIRST


def _replace(graph: Graph, split: Node, between: list[Node], back: Node) -> None:
    """``glow.packed_attention(qkv[, mask])`` in place of the output transpose ``back``,
    writing its value; the split and ``between`` removed."""
    sdpa = between[-1]
    operands: list[Value] = [split.inputs[0], *sdpa.inputs[3:]]
    back.op = "glow.packed_attention"
    back.inputs = operands
    back.attrs = {"scale": float(sdpa.attrs["scale"])}
    for node in (split, *between):
        graph.nodes.remove(node)
