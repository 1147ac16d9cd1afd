"""Where a batch slice stops running image by image: :func:`head_length`.

A backend that runs a batch as slices, one per worker, runs each slice layer by layer over
its images — except for its first layers, on large maps, which it runs image by image. Layer
by layer, a slice holds every layer's maps for all its images at once: MobileNetV2's
expanded 96x112x112 map is 4.8 MB an image, 19 MB for a slice of 4, 38 MB for two workers,
beyond the 32 MB of L3 of the machine measured (an AMD EPYC VM, Zen 4). Image by image, one
image's maps go through those layers while in cache, and their convolutions lose nothing:
on maps that large each image's GEMM is wide (glow_like batches a slice's images into one
GEMM only below 1024 output pixels). The layers after, on small maps, keep the whole slice.

Same process, batch 8, two workers, slices layer by layer / with the head image by image
(glow_like, best of 6-40 calls): ResNet-18 121.7 / 111.2 ms, ResNet-50 340.7 / 320.1,
MobileNetV2 32.1 / 30.4, EfficientNet-B0 51.4 / 49.6. Every layer image by image lost
instead (ResNet-18 124.5 / 166.7 ms): the small maps' GEMMs want the slice's columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod

HEAD_MIN_PIXELS = 1024  # maps of at least this many pixels (32x32) are large
# A step whose maps all have at least HEAD_MID_PIXELS (28x28) is large too where they hold at least
# MAP_WEIGHT_RATIO times the values of its weights: a mobile network's depthwise and 1x1 layers
# there, whose slice of four images' maps fills an L2 of 2 MB (MobileNetV2's 192 x 28 x 28 map,
# 600 KB an image), and whose weights are small; not ResNet's 3x3 layers there (128 -> 128 at
# 28x28: 147k weights over maps of 200k values), whose weights every image would stream again.
# Two glow_like handles in one process, batch 8 slices, calls alternating, with / without the
# rule, median of 24-40 pairs, both build orders (Intel Xeon VM, my script): MobileNetV2
# 0.980-0.986, EfficientNet-B0 0.973-1.025, MixNet-S 0.959-0.985, MobileNetV3-Large 0.969-0.976,
# ShuffleNetV2 0.955-0.984, MobileNetV3-Small 0.998-1.006, ResNet-50 0.995 (ResNet-18's head
# stays). Every step on 28x28 maps image by image had taken ResNet-18 to 1.02.
HEAD_MID_PIXELS = 784
MAP_WEIGHT_RATIO = 4

# A step as head_length reads it: the shapes of the maps it reads and writes, and how many
# weight values (constants) it reads.
HeadStep = tuple[Sequence[Sequence], int]


def head_length(steps: Iterable[HeadStep], min_pixels: int = HEAD_MIN_PIXELS,
                mid_pixels: int = HEAD_MID_PIXELS) -> int:
    """How many leading steps a batch slice runs image by image: through the last large step
    (0 if none is) — one that reads or writes a map ``[N, C, H, W]`` of at least ``min_pixels``
    pixels, or whose maps all have at least ``mid_pixels`` and hold :data:`MAP_WEIGHT_RATIO`
    times its weights' values (not a strided layer into a smaller map: ResNet-18's 1x1
    downsample from 28x28 to 14x14 would take the next stage's first layers into the head).
    ``steps`` gives, per step in run order, ``(maps, weights)``: the shapes of the maps it
    reads and writes and its weights' values — a backend passes those of its convolutions and
    poolings, and no maps for other steps, whose 4-d values may be laid out otherwise
    (ConvNeXt's channels-last [N, H, W, C] blocks). A dimension that is not an int (a
    symbolic size) counts as small."""
    last = 0
    for i, (maps, weights) in enumerate(steps):
        if _large(maps, weights, min_pixels, mid_pixels):
            last = i + 1
    return last


def _large(maps: Sequence[Sequence], weights: int, min_pixels: int, mid_pixels: int) -> bool:
    sized = [shape for shape in maps
             if len(shape) == 4 and all(isinstance(d, int) for d in shape[1:])]
    if any(shape[2] * shape[3] >= min_pixels for shape in sized):
        return True
    if not sized or any(shape[2] * shape[3] < mid_pixels for shape in sized):
        return False
    return sum(prod(shape[1:]) for shape in sized) >= MAP_WEIGHT_RATIO * weights
