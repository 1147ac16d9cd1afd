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

HEAD_MIN_PIXELS = 1024  # maps of at least this many pixels (32x32) are large


def head_length(steps: Iterable[Iterable[Sequence[int]]], min_pixels: int = HEAD_MIN_PIXELS) -> int:
    """How many leading steps a batch slice runs image by image: through the last step that
    reads or writes a map ``[N, C, H, W]`` of at least ``min_pixels`` pixels (0 if none does).
    ``steps`` gives, per step in run order, the shapes of the maps it reads and writes — a
    backend passes those of its convolutions and poolings, and none for other steps, whose
    4-d values may be laid out otherwise (ConvNeXt's channels-last [N, H, W, C] blocks). A
    dimension that is not an int (a symbolic size) counts as small."""
    last = 0
    for i, shapes in enumerate(steps):
        if any(_large(shape, min_pixels) for shape in shapes):
            last = i + 1
    return last


def _large(shape: Sequence, min_pixels: int) -> bool:
    return (len(shape) == 4 and isinstance(shape[2], int) and isinstance(shape[3], int)
            and shape[2] * shape[3] >= min_pixels)
