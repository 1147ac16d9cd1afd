"""Algorithm selection, decided ahead of time: large 3x3 stride-1 convolutions with
constant weights and enough output tiles run as Winograd F(4x4, 3x3)
(``algo="winograd"``); the rest stay im2col + GEMM.

The thresholds come from timing both kernels inside ResNet-18 (two intra-op workers,
single-threaded OpenBLAS; per-instruction medians). Winograd won on 64x56x56 (1.45 ->
1.20 ms at batch 1, 12.0 -> 9.5-10.5 ms at batch 8), 128x28x28 (1.20 -> 1.00 ms; 10.0 ->
5.3 ms), 256x14x14 at batch 8 (8.5 -> 5.2 ms) and 512x7x7 at batch 8 (7.9 -> 6.3 ms). It
lost where a batch has few tiles: its transformed kernel is 4x the weight and is streamed
once per chunk, so with 16 tiles (256x14x14, batch 1: 1.2 -> 1.5 ms) or 4 tiles
(512x7x7, batch 1: 1.5 -> 2.2 ms) the channel GEMMs are memory-bound. In isolation it also
lost on small convolutions, which im2col runs without the pool hand-offs (64x14x14,
batch 1: 0.38 vs 0.15 ms), and broke even around 60 MFLOP; narrow layers gain nothing.
"""

from __future__ import annotations

from lowerkit.backend.cpu import team_layers
from lowerkit.ir import Graph
from lowerkit.passes import const_value

from ..kernels.winograd import OUT, applicable

MIN_CHANNELS = 32  # input and output channels
MIN_FLOPS = 100e6  # direct-convolution FLOPs over the batch
MIN_TILES = 32  # output tiles over the batch (the chunk a GEMM streams the kernel for); see winograd_tiles


def select_conv_algorithm(graph: Graph) -> bool:
    """Mark eligible float convolutions for Winograd; True if any was marked."""
    changed = False
    producers = graph.producers()
    for node in graph.nodes:
        if node.op not in ("conv2d", "glow.conv2d") or node.attrs.get("algo") == "winograd":
            continue
        weight = const_value(producers.get(node.inputs[1]))
        if weight is None or node.output.type.dtype != "f32" or not applicable(weight.shape, node.attrs):
            continue
        oc, c = weight.shape[0], weight.shape[1]
        n, _, oh, ow = node.output.type.shape
        tiles = n * -(-oh // OUT) * -(-ow // OUT)
        if (min(oc, c) < MIN_CHANNELS or 2 * n * oc * c * 9 * oh * ow < MIN_FLOPS
                or tiles < team_layers.winograd_tiles(c, oc, MIN_TILES)):
            continue
        node.attrs = {**node.attrs, "algo": "winograd"}
        changed = True
    return changed
