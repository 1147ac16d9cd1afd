"""Which nodes nnpack claims in their graph: no region that cannot pay for its boundary.

A region boundary costs a call and copies of the values crossing it, and stops fusion on both
sides (``docs/partitioning.md``). nnpack is a specialist ahead of a general backend, so where
it can run a node (:func:`.support.support_reason`) it still declines one that would *start*
a region in the middle of another backend's work — a node none of whose inputs comes from the
method's inputs or from a node nnpack claims — unless the node is a dense convolution heavy
enough to pay for that boundary (:data:`START_MIN_MACS`). Everything else nnpack claims only
to continue its regions: activations and residual adds it fuses into the layer before them,
depthwise and small convolutions, pooling, the classifier. And where another backend runs
part of the graph, nnpack declines a group of connected nodes it could run that does less
than :data:`START_MIN_MACS` multiply-adds in all: a light prefix before the first node it
cannot run (ShuffleNetV2's stem and first block, a transformer's patch embedding) saves less
than its boundary costs.

Without this rule the priority plan cut transformers and channel-shuffling networks into
dozens of alternating regions: ``[nnpack, glow_like]`` ran DeiT-Tiny in 41 ms against 28 for
glow_like alone (76 regions), MixNet-S in 15.1 against 6.8 (43), ShuffleNetV2 in 7.5 against
4.3 (35; AMD EPYC Zen 3 VM, batch 1, ``benchmarks/model.py --yardstick``).

The work is counted per image (the batch dimension of the node's output divided out): a
boundary's copies grow with the batch as the work does, so a graph splits the same way at
any batch. Counted over the batch, ConvNeXt-T at batch 8 was cut into 38 regions and ran
1.097x glow_like's time, and DeiT-Tiny's patch embedding became a region of its own
(``benchmarks/mixed_plan.py --batch 8``).
"""

from __future__ import annotations

import weakref
from typing import Any

from lowerkit.backend.cpu.environment import whole_number
from lowerkit.ir.node import Node

from .support import STRUCTURAL_OPS, attrs_of, support_reason

# A dense forward convolution of at least this many multiply-adds an image may start a region of
# its own, and a group of nodes nnpack claims beside another backend must do as many in all. A boundary costs ~10 µs of call and a copy of each value crossing it (a 56x56 map of 96
# channels: ~0.1 ms in and out), and the layers on either side lose their fusion; at the
# ~100 GFLOP/s the kernels reach, 100M multiply-adds take ~2 ms, where a faster kernel can win
# that back. Lighter layers cannot: ShuffleNetV2's 1x1 convolutions (2-6M), ConvNeXt-T's 7x7
# depthwise (4-15M) and 2x2 downsampling ones (58M). UNet's convolutions after its upsampling
# and concatenations (0.5-4.8G) start regions.
START_MIN_MACS = 100_000_000
# Overrides START_MIN_MACS (read at every partition); 0 keeps every region a dense
# convolution can start, whatever its size.
REGION_MACS_ENV = "LOWERKIT_NNPACK_REGION_MACS"
# Nodes that may start a region whatever their size: the gradients' convolutions, whose
# graphs are built from the forward's saved values (method inputs) in any case.
_ALWAYS_START = ("conv2d_input_grad", "conv2d_weight_grad")

_memo: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], dict[Node, str | None]]] = weakref.WeakKeyDictionary()


def context_reason(node: Node, graph: Any) -> str | None:
    """``None`` when nnpack claims ``node`` of ``graph`` (:func:`support_reason` and the
    region rule above), else why it declines. Worked out once per graph."""
    if node.op in STRUCTURAL_OPS:
        return None
    reasons = _reasons(graph)
    if node not in reasons:  # a node added since: work the graph out again
        _memo.pop(graph, None)
        reasons = _reasons(graph)
    return reasons[node] if node in reasons else support_reason(node)  # not the graph's: alone


def region_macs() -> int:
    """The multiply-adds a region must be able to do: ``$LOWERKIT_NNPACK_REGION_MACS``, else
    :data:`START_MIN_MACS`."""
    return whole_number(REGION_MACS_ENV, START_MIN_MACS, "multiply-adds (0 or more)")


def _reasons(graph: Any) -> dict[Node, str | None]:
    least = region_macs()
    cached = _memo.get(graph)
    if cached is not None and cached[0] == (len(graph.nodes), least):
        return cached[1]
    producers = graph.producers()
    claimed: set[Node] = set()
    reasons: dict[Node, str | None] = {}
    for node in graph.nodes:  # topological order: a node's producers are decided first
        if node.op in STRUCTURAL_OPS:
            continue
        reason = support_reason(node)
        if reason is None and not _continues(node, producers, claimed) and not _starts(node, least):
            reason = _start_reason(node, least)
        reasons[node] = reason
        if reason is None:
            claimed.add(node)
    if len(claimed) < len(reasons):  # another backend takes part of the graph: weigh each group
        for group in _groups(claimed, producers):
            work = sum(image_multiply_adds(n) for n in group)
            if work < least:
                for n in group:
                    reasons[n] = _light_reason(work, least)
    _memo[graph] = ((len(graph.nodes), least), reasons)
    return reasons


def _groups(claimed: set[Node], producers: dict) -> list[list[Node]]:
    """The claimed nodes in groups joined by the values they pass each other (each group is
    one or more regions of nnpack's)."""
    parent = {n: n for n in claimed}

    def root(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in claimed:
        for value in node.inputs:
            producer = producers.get(value)
            if producer in parent:
                parent[root(producer)] = root(node)
    groups: dict[Node, list[Node]] = {}
    for node in claimed:
        groups.setdefault(root(node), []).append(node)
    return list(groups.values())


def _light_reason(work: int, least: int) -> str:
    return (f"the nodes nnpack could run around it do {work / 1e6:.3g}M multiply-adds an image in all, under the "
            f"{least / 1e6:.3g}M that pay for their region's boundaries (a call, copies in and out) while "
            f"another backend runs the rest of the graph (${REGION_MACS_ENV} sets the bound)")


def _continues(node: Node, producers: dict, claimed: set[Node]) -> bool:
    """Whether a data input of ``node`` comes from the method's inputs or a claimed node."""
    for value in node.inputs:
        producer = producers.get(value)
        if producer is None or producer in claimed:
            return True
    return False


def _starts(node: Node, least: int) -> bool:
    """Whether ``node`` may start a region: a dense convolution of ``least`` multiply-adds or
    more, or a gradient's."""
    if node.op in _ALWAYS_START:
        return True
    return node.op == "conv2d" and attrs_of(node).get("groups", 1) == 1 and image_multiply_adds(node) >= least


def multiply_adds(node: Node) -> int:
    """A convolution's (forward or gradient) or fully-connected layer's multiply-adds (0 for
    other nodes): output elements x the inputs each one sums — a gradient's as many as its
    forward's (a symbolic dimension — a dynamic batch — counted as 1)."""
    outputs = node.outputs[0]
    if node.op == "conv2d":
        weight = node.inputs[1].type.shape  # [OC, C / groups, KH, KW]
    elif node.op == "conv2d_input_grad":  # (weight, grad_output): as many as the forward's
        weight, outputs = node.inputs[0].type.shape, node.inputs[1]
    elif node.op == "conv2d_weight_grad":  # (input, grad_output), weight_size attribute
        weight, outputs = attrs_of(node)["weight_size"], node.inputs[1]
    elif node.op == "linear":
        weight = (1, node.inputs[1].type.shape[1], 1, 1)  # [out, in]: each output sums `in`
    else:
        return 0
    out = 1
    for d in outputs.type.shape:
        out *= d if isinstance(d, int) else 1
    return out * int(weight[1]) * int(weight[2]) * int(weight[3])


def image_multiply_adds(node: Node) -> int:
    """:func:`multiply_adds` per image: divided by the leading (batch) dimension of the node's
    output where that is a whole number, else all of them."""
    shape = node.outputs[0].type.shape
    batch = shape[0] if shape else 1
    return multiply_adds(node) // batch if isinstance(batch, int) and batch > 1 else multiply_adds(node)


def _start_reason(node: Node, least: int) -> str:
    size = f" (this one {image_multiply_adds(node) / 1e6:.3g}M)" if node.op == "conv2d" else ""
    return (f"it would start a region of its own: none of its inputs comes from a node nnpack runs or from the "
            f"method's inputs, and only a dense convolution of at least {least / 1e6:.3g}M multiply-adds an image{size} "
            f"pays for a region's boundary (a call, copies in and out; ${REGION_MACS_ENV} sets the bound)")
