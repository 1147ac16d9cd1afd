"""``auto``: which algorithm a convolution gets.

Two policies. :func:`nnpack_rules` is NNPACK's published selection
(``nnp_convolution_inference``). :func:`select_algorithm` (what ``auto`` uses) is a cost
model measured on this backend: in numpy the fast algorithms pay for their transforms in
memory passes, and the transformed kernel (36 floats per 3x3 filter for wt6x6, 16x9
complex for ft16x16) must be read once per call, so they only win when the call has enough
tiles to amortise it. The thresholds come from the measurements in docs/nnpack.md.
"""

from __future__ import annotations

from lowerkit.backend.cpu import team_layers

from .geometry import ConvGeometry
from .tiles import tile_counts

# wt6x6 beats implicit GEMM from this many 4x4 output tiles per unit of work. On the
# batched path every worker streams the whole transformed kernel, and below 24 tiles per
# worker (7x7 layers) the batch-folded implicit GEMM wins. On the per-image path the
# kernel is split by output channels and read once: wt6x6 wins from 14x14 (16 tiles) and
# ties implicit GEMM on 7x7 (4 tiles), which then keeps the baseline's algorithm.
WINOGRAD_MIN_TILES = 24
WINOGRAD_MIN_TILES_PER_IMAGE = 16
# In a team plan (one image on every core, lowerkit.backend.cpu.team_layers), Winograd pays from
# this many 4x4 output tiles over the images of a call, as in glow_like's team form: at 16 (a
# 14x14 map, batch 1) wt6x6 lost to implicit GEMM — ResNet-50's five such layers 1.27-1.35 vs
# 1.0 ms each; `[nnpack, glow_like]` at batch 1 39.9 -> 37.2 ms with this rule (glow_like 37.4).
# That was an Intel Xeon (full-width AVX-512); elsewhere layers of at most 256 x 256 channels
# take it from 16 tiles (lowerkit.backend.cpu.team_layers.winograd_tiles, measured there).
TEAM_WINOGRAD_MIN_TILES = 32
# Winograd's transforms cost per channel what its GEMMs save per pair of channels: with few
# input channels they outweigh the saving (a 3x3 stride-1 layer + ReLU, nnpack wt6x6 /
# implicit GEMM, AMD EPYC Zen 3 VM, two threads, best of 15: batch 1 3->64 at 256x256 10.7 /
# 2.8 ms, 8->64 at 128x128 4.1 / 2.8, 16->64 4.2 / 4.0, 32->64 6.0 / 8.0; batch 8 at 64x64
# 16->64 5.4 / 4.4, 24->48 5.2 / 4.8, 32->64 7.0 / 9.6). glow_like's rule has the same bound.
WINOGRAD_MIN_INPUTS = 32
# ft16x16 beats implicit GEMM when (images per unit of work x 16x16 tiles) x kernel area reaches this.
FFT16_MIN_WORK = 400


def nnpack_rules(geom: ConvGeometry) -> str:
    """NNPACK's choice: stride 1 -> 1x1 ``direct``, 3x3 ``wt8x8``, kernels 2..8 ``ft8x8``
    unless 8x8 tiles need more than 4x the tiles of 16x16 (then ``ft16x16``), up to 16
    ``ft16x16``; anything else ``implicit_gemm``. (NNPACK sends strided 1x1 to implicit
    GEMM; ``direct`` here handles a stride by slicing, so it keeps 1x1.)
    """
    kh, kw = geom.kernel
    if (kh, kw) == (1, 1):
        return "direct"
    if geom.stride != (1, 1):
        return "implicit_gemm"
    if (kh, kw) == (3, 3):
        return "wt8x8"
    if min(kh, kw) >= 2 and max(kh, kw) <= 8:
        t8 = tile_counts(geom.out_hw, (8 - kh + 1, 8 - kw + 1))
        t16 = tile_counts(geom.out_hw, (16 - kh + 1, 16 - kw + 1))
        return "ft8x8" if t8[0] * t8[1] <= 4 * t16[0] * t16[1] else "ft16x16"
    if min(kh, kw) >= 2 and max(kh, kw) <= 16:
        return "ft16x16"
    return "implicit_gemm"


def images_per_chunk(batch: int, workers: int, batch_threshold: int) -> int:
    """How many images one unit of work transforms together: all of them on the per-image
    path, a worker's share of the batch on the batched path."""
    if workers > 1 and batch > 1 and batch >= batch_threshold:
        return -(-batch // workers)
    return batch


def select_algorithm(geom: ConvGeometry, batch: int = 1, workers: int = 1, batch_threshold: int = 2,
                     team: bool = False) -> str:
    """The measured policy behind ``auto`` for calls of ``batch`` images on ``workers`` threads.

    With ``m`` = :func:`images_per_chunk`: 1x1 -> ``direct``; strided -> ``implicit_gemm``;
    3x3 -> ``wt6x6`` (Winograd F(4x4, 3x3), an extension) from :data:`WINOGRAD_MIN_INPUTS`
    input channels and m x (4x4 tiles per image)
    = :data:`WINOGRAD_MIN_TILES` on the batched path or
    :data:`WINOGRAD_MIN_TILES_PER_IMAGE` on the per-image path, else ``implicit_gemm``;
    kernels from 2x2 to 16x16 -> ``ft16x16`` when m x tiles x kernel area reaches
    :data:`FFT16_MIN_WORK`, else ``implicit_gemm``. ``ft8x8`` is never
    picked: on 8x8 tiles a kernel of 4 or more leaves few outputs per tile, and 3x3 goes
    to Winograd; nor are ``wt8x8`` (wt6x6 measured as fast or faster on every ResNet-18 /
    VGG layer: its transformed kernel is 36 floats per filter, not 64) and ``wt4x4``.
    ``team``: the layer runs as a team region (one image on every core), where Winograd
    takes :data:`TEAM_WINOGRAD_MIN_TILES` tiles over the batch (16 for layers of at most
    256 x 256 channels where the CPU lacks full-width AVX-512:
    ``lowerkit.backend.cpu.team_layers.winograd_tiles``).
    """
    chunk = images_per_chunk(batch, workers, batch_threshold)
    kh, kw = geom.kernel
    if (kh, kw) == (1, 1):
        return "direct"
    if geom.stride != (1, 1) or min(kh, kw) < 2 or max(kh, kw) > 16:
        return "implicit_gemm"
    if (kh, kw) == (3, 3):
        if geom.in_channels < WINOGRAD_MIN_INPUTS:
            return "implicit_gemm"
        th, tw = tile_counts(geom.out_hw, (4, 4))
        if team:
            least = team_layers.winograd_tiles(geom.in_channels, geom.out_channels, TEAM_WINOGRAD_MIN_TILES)
            return "wt6x6" if batch * th * tw >= least else "implicit_gemm"
        least = WINOGRAD_MIN_TILES if chunk < batch else WINOGRAD_MIN_TILES_PER_IMAGE
        return "wt6x6" if chunk * th * tw >= least else "implicit_gemm"
    th, tw = tile_counts(geom.out_hw, (16 - kh + 1, 16 - kw + 1))
    return "ft16x16" if chunk * th * tw * kh * kw >= FFT16_MIN_WORK else "implicit_gemm"
