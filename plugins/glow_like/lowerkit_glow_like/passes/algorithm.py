"""Algorithm selection, decided ahead of time: 3x3 stride-1 convolutions with constant
weights, many channels and enough output tiles run as Winograd F(2x2, 3x3)
(``algo="winograd"``); the rest stay im2col + GEMM.

The thresholds come from timing both kernels on ResNet-18's layers (OpenBLAS, numpy
transforms): single-threaded, Winograd won only from 256 channels up (256x14x14: -13% at
batch 1, -18% at batch 8), lost at 64 channels (+5% / +30%) and with few tiles (512x7x7
at batch 1: +38%); with two intra-op threads its three phases scale worse than im2col, so
at batch 1 (49 tiles at 14x14) the whole network was no faster. It is kept for batches.
"""

from __future__ import annotations

from lowerkit.ir import Graph

from .._graph import const_value
from ..kernels.winograd import applicable

MIN_CHANNELS = 256  # below this the transforms cost more than the multiplies saved
MIN_TILES = 256  # 2x2 output tiles over the batch: fewer make the 16 GEMMs too skinny


def select_conv_algorithm(graph: Graph) -> bool:
    """Mark eligible float convolutions for Winograd; True if any was marked."""
    changed = False
    producers = graph.producers()
    for node in graph.nodes:
        if node.op not in ("conv2d", "glow.conv2d") or node.attrs.get("algo") == "winograd":
            continue
        weight = const_value(producers.get(id(node.inputs[1])))
        if weight is None or node.output.type.dtype != "f32" or not applicable(weight.shape, node.attrs):
            continue
        n, _, oh, ow = node.output.type.shape
        if min(weight.shape[0], weight.shape[1]) < MIN_CHANNELS or n * ((oh + 1) // 2) * ((ow + 1) // 2) < MIN_TILES:
            continue
        node.attrs = {**node.attrs, "algo": "winograd"}
        changed = True
    return changed
