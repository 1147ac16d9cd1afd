"""``fuse_plane_means``: a global average pool of a depthwise convolution's output ->
``glow.depthwise_mean(x, w[, bias])`` with two outputs, the map and its planes' means.

Squeeze-and-excitation blocks (EfficientNet, MobileNetV3, MixNet) pool the depthwise layer's
activated output to one value per channel. As an instruction of its own the pool reads the
whole map again once the layer is done — from L2 or beyond, since the map is written plane
by plane — and costs a team region; the compiled depthwise kernels can sum each plane right
after its activation instead, while it is in L1 (``plane_mean``, shared with the pool kernel,
so the means are the same bits either way). Only for the kernels that take ``means``:
``depthwise3x3_same``, ``depthwise3x3_s2`` and ``depthwise_blocked``. fp32 programs only (an
int8 program quantizes the convolution). ``LOWERKIT_PLANE_MEANS=0`` (read at compile) keeps
the pools apart.
"""

from __future__ import annotations

from lowerkit.backend.cpu.jit.depthwise import MEAN_ALGORITHMS, means_fused
from lowerkit.ir import Graph
from lowerkit.passes import const_value

from ..kernels.grouped import grouped_algorithm


def fuse_plane_means(graph: Graph) -> bool:
    """Fold every ``global_avg_pool2d`` of a depthwise convolution (constant weight) into the
    convolution; True if any was folded."""
    if not means_fused():
        return False
    changed = False
    for pool in list(graph.nodes):
        if pool.op != "global_avg_pool2d":
            continue
        producers = graph.producers()
        conv = producers.get(pool.inputs[0])
        if (conv is None or conv.op not in ("conv2d", "glow.conv2d") or len(conv.outputs) != 1
                or conv.attrs.get("algo") is not None or conv.attrs.get("residual") or len(conv.inputs) > 3
                or conv.output.type.dtype != "f32" or const_value(producers.get(conv.inputs[1])) is None):
            continue
        x_type, w_type, out_type = conv.inputs[0].type, conv.inputs[1].type, conv.output.type
        if len(w_type.shape) != 4 or len(x_type.shape) != 4:
            continue
        if grouped_algorithm(x_type.shape, w_type.shape, out_type.shape, conv.attrs) not in MEAN_ALGORITHMS:
            continue
        conv.op = "glow.depthwise_mean"
        conv.outputs.append(pool.output)
        graph.nodes.remove(pool)
        changed = True
    return changed
