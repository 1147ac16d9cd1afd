"""How a layer of one image runs as team regions: the choices glow_like's and nnpack's team
forms share (``lowerkit.backend.cpu.jit.team`` has the kernels; see docs/compiled-kernels.md).

- :class:`DenseTeamForm` — a dense convolution: a 1x1 one as one GEMM region; one with at
  least :data:`TILED_PIXELS` outputs whose GEMM is not the panel GEMM's as implicit GEMM in
  tiles of ~:data:`TILE_BYTES` of columns per thread; others as im2col then the GEMM. The
  GEMM is the compiled panel GEMM on a weight packed once where :func:`.panels.fits` says it
  is faster, else sgemm in bands of output channels, or of pixels for few channels over many
  inputs; a stem (few input channels, :func:`.direct.fits`) runs direct on the packed weight
  (:class:`.direct.DirectConv`: no column matrix), and a layer of many input channels that
  :func:`.channel_direct.fits` (given the image size) direct with its output channels in the
  vector lanes (:class:`.channel_direct.ChannelDirectConv`);
- :func:`winograd_tiles` — from how many output tiles a 3x3 layer runs as Winograd;
  :func:`winograd_weights` / :func:`run_winograd` — its team form, its channel GEMMs on BLAS
  or on the panel GEMM;
- :func:`depthwise_scratch` / :func:`run_depthwise` — the depthwise kernels with a team form;
- the sizes below which a layer stays on the calling thread (a region costs ~3.5 us).

Plain Python: nothing here imports numba (the kernels arrive through ``Team.kernels()``, or
load when a packed weight or a direct form is made).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from . import channel_direct, panels
from .calls import sequence
from .channel_direct import ChannelDirectConv, StripWeight
from .direct import DirectConv
from .direct import fits as direct_fits
from .jit.depthwise import NO_BLOCKS, NO_MEANS
from .panels import PackedTuples

NO_RESIDUAL = np.empty((0, 0, 0, 0), np.float32)  # the Winograd output's residual argument: none
from .team import Team
from .winograd import input_scratch_floats, output_group_tiles

MIN_FLOPS = 1_000_000  # dense convolutions, per image
MIN_DEPTHWISE_MACS = 100_000
MIN_LINEAR_WEIGHTS = 65_536
MIN_POOL_OUTPUTS = MIN_DEPTHWISE_MACS // 9  # the 3x3 max pool: nine taps an output
# GEMMs of at most this many output channels and at least twice as many inputs split
# columns (pixels) between threads, not rows: each thread then packs half the columns.
COLUMN_SPLIT_ROWS = 64
# Convolutions (not 1x1) with at least this many output pixels run as implicit GEMM in tiles
# of about TILE_BYTES of columns per thread, on sgemm: ResNet-18's 7x7 stem, batch 1, 2.78 ->
# 1.70 ms (its whole column matrix is 7.4 MB). Smaller outputs gained nothing (28x28: 0.78 vs
# 0.79 ms). Not where the panel GEMM takes the layer (few rows of columns: the stems): one
# team im2col, then the panel GEMM in bands, beat the tiles (each thread's im2col of a few
# rows and sgemm) on the stems, glow_like batch 1, two threads, ms: MobileNetV2 0.42 -> 0.28-0.33,
# EfficientNet-B0 0.52-0.55 -> 0.41, ResNet-18 2.13 -> 1.95-2.03.
TILED_PIXELS = 1024
TILE_BYTES = 384 * 1024
# ... and at least this many rows of columns: a tile's sgemm over fewer (the mobile nets' 3x3
# stems, 27) costs more per pixel than one sgemm band over the whole image, where the panel
# GEMM does not take the stem (the avx512 rule set, panels.wide_vectors). Intel Xeon VM, one
# image, two threads, µs, tiles / untiled: MobileNetV2's 3->32 3x3/2 415 / 318; ResNet's
# 3->64 7x7/2 (147 rows) 1946 / 2169; 64->64 3x3 at 56 (576) 1488 / 1487.
TILED_MIN_INPUTS = 64


def linear_on_team(rows: int, weights: int) -> bool:
    """Whether a fully-connected layer of ``rows`` input rows and ``weights`` weights runs as a
    team region: two rows or more, and a weight of at least :data:`MIN_LINEAR_WEIGHTS` or
    :data:`MIN_FLOPS` of work. One row is a matrix-vector product, and numpy's (BLAS's gemv,
    one thread) beat the team's two sgemm bands on an AMD EPYC VM: 1280x1000, 0.09 vs 0.20 ms
    with the weight in cache, 0.17-0.20 vs 0.31-0.33 ms without (sgemm packs its band of the
    weight first); one row takes the packed bands instead where :func:`row_on_team` says so.
    (With the weight alone, Swin-T's first-stage layers — 3136 tokens, 96 x 288 weights — ran
    numpy's product on one thread, BLAS being held at one in team mode.)"""
    return rows >= 2 and (weights >= MIN_LINEAR_WEIGHTS or 2 * rows * weights >= MIN_FLOPS)


def row_on_team(rows: int, weights: int) -> bool:
    """Whether a fully-connected layer of one row on a constant weight runs as a team region on
    the weight packed in bands (``panels.PackedBands.run_team``: each thread streams its share
    of the weight, where gemv reads all of it on one thread). Both plugins ask it too for a
    1x1 convolution of one output pixel an image (a squeeze-excitation layer on the pooled
    map: the same matrix-vector product), which then runs as a team GEMM in bands of the
    weight's panels."""
    return rows == 1 and weights >= MIN_LINEAR_WEIGHTS


# Winograd F(4x4, 3x3) on few output tiles (a 14x14 map at batch 1 has 16): both plugins
# take it from 32 tiles over a batch, since with fewer its transformed weight (4x the
# weight, streamed once per call) made the channel GEMMs memory-bound against im2col and a
# GEMM with 16-float vectors — Intel Xeon VM (full-width AVX-512): ResNet-50's 256x14x14
# layers at batch 1 1.27-1.35 against 1.0 ms each (nnpack). Where the GEMMs run 8-float
# vectors' worth an instruction (AVX2; AVX-512 in halves) the arithmetic saving counts for
# more: AMD EPYC Zen 4 VM, 2026-12-05, same process, handles compiled both ways, calls
# alternating, the median of 30-60 paired ratios, 16 tiles / 32: glow_like at batch 1
# ResNet-18 0.940-0.991, ResNet-50 0.964-0.968; [nnpack, glow_like] 0.934-0.977 and 0.964.
# Those were the 256-channel layers; ResNet-18/50 at batch 4, whose 512x7x7 layers have 16
# tiles, lost 3-4% (1.028-1.036): hence the bound on the weights.
WINOGRAD_FEW_TILES = 16
WINOGRAD_FEW_TILES_MAX_WEIGHTS = 256 * 256  # input x output channels


def winograd_tiles(c: int, oc: int, usual: int) -> int:
    """The 4x4 output tiles over a batch from which a 3x3 convolution of ``c`` input and
    ``oc`` output channels runs as Winograd F(4x4, 3x3): a plugin's ``usual`` threshold, or
    :data:`WINOGRAD_FEW_TILES` for at most :data:`WINOGRAD_FEW_TILES_MAX_WEIGHTS` channel
    pairs outside the ``avx512`` panel rules (``panels.wide_vectors``: sgemm there)."""
    if c * oc <= WINOGRAD_FEW_TILES_MAX_WEIGHTS and not panels.wide_vectors():
        return min(usual, WINOGRAD_FEW_TILES)
    return usual


DEPTHWISE_ALGORITHMS = ("depthwise3x3_same", "depthwise3x3_s2", "depthwise_blocked", "depthwise_rows")


@dataclass(frozen=True)
class DenseTeamForm:
    """The team form of a dense convolution ``w2`` [OC, K] of one geometry; :meth:`run`
    computes one image. ``cols_shape`` is the float32 column scratch :meth:`run` needs
    (None for 1x1 layers, which read the image in place). ``panel``: a layer (1x1, or im2col
    then the GEMM) whose GEMM is the panel GEMM, given the weight :meth:`pack` made.
    ``channel``: a layer run by :class:`.channel_direct.ChannelDirectConv` (``cols_shape`` then
    holds its padded image, None where it reads the image in place; :meth:`pack` makes its
    strips)."""

    pointwise: bool
    panel: bool
    tiled: bool
    by_columns: bool
    tile_rows: int
    cols_shape: tuple[int, int] | None
    geometry: tuple[int, ...]  # kh, kw, sh, sw, pt, pl, dh, dw (as jit.conv.im2col takes them)
    out_hw: tuple[int, int]

    direct: DirectConv | None = None  # a stem, run direct (cols_shape then holds its phases)
    channel: ChannelDirectConv | None = None  # many input channels, run direct by output channels

    @classmethod
    def of(cls, oc: int, k: int, kernel, stride, padding, dilation, out_hw, ways: int,
           in_hw: tuple[int, int] | None = None) -> DenseTeamForm:
        """The form of a layer of ``oc`` output channels and ``k`` rows of columns; ``in_hw``
        (the input's height and width) lets it choose :class:`.channel_direct.ChannelDirectConv`."""
        (kh, kw), (oh, ow) = tuple(kernel), tuple(out_hw)
        pointwise = (kh, kw) == (1, 1) and tuple(stride) == (1, 1) and not any(padding)
        c = k // (kh * kw)
        geometry = (kh, kw, *stride, *tuple(padding)[:2], *dilation)
        direct = None
        if not pointwise and direct_fits(c, (kh, kw), stride, dilation, (oh, ow)):
            direct = DirectConv.of(c, (kh, kw), stride, padding, (oh, ow))
        elif in_hw is not None and channel_direct.fits(c, (kh, kw), stride=stride):
            channel = ChannelDirectConv.of((c, *in_hw), (kh, kw), stride, padding, dilation, (oh, ow))
            return cls(pointwise=False, panel=False, tiled=False, by_columns=False, tile_rows=1,
                       cols_shape=(1, int(np.prod(channel.padded_shape))) if channel.pads else None,
                       geometry=geometry, out_hw=(oh, ow), channel=channel)
        panel = direct is not None or panels.fits(k, oh * ow, team=True)
        tiled = not pointwise and not panel and oh * ow >= TILED_PIXELS and k >= TILED_MIN_INPUTS
        tile_rows = max(1, min(oh, TILE_BYTES // (4 * k * ow)))
        if direct is not None:
            cols_shape = (1, int(np.prod(direct.phases_shape)))
        else:
            cols_shape = None if pointwise else ((ways, k * tile_rows * ow) if tiled else (1, k * oh * ow))
        return cls(pointwise, panel, tiled, oc <= COLUMN_SPLIT_ROWS and k >= 2 * oc, tile_rows, cols_shape,
                   geometry, (oh, ow), direct)

    @property
    def fuses_residual(self) -> bool:
        """Whether :meth:`run` takes a ``residual`` (a fused residual add): the panel GEMM's
        forms, whose tiles add it before the activation (not the stems' direct or tiled
        forms), and the :attr:`channel` form, whose tiles do too."""
        return (self.panel and self.direct is None and not self.tiled) or self.channel is not None

    def pack(self, w2: np.ndarray, bias: np.ndarray) -> panels.PackedWeight | StripWeight | None:
        """The weight (and bias) as :meth:`run` takes them for a :attr:`panel` or
        :attr:`channel` layer, else None."""
        if self.channel is not None:
            return StripWeight.of(w2, bias)
        return panels.PackedWeight.of(w2, bias) if self.panel else None

    def shared(self, w: np.ndarray, bias: np.ndarray | None) -> panels.PackedWeight | StripWeight | None:
        """:meth:`pack` of a constant weight, once for every thread that binds it (the
        classes' ``shared``); None for a weight given at call time or a form without one."""
        if self.channel is not None:
            return StripWeight.shared(w, bias)
        return panels.PackedWeight.shared(w, bias) if self.panel else None

    def run(self, team: Team, x: np.ndarray, w2: np.ndarray, bias: np.ndarray, out: np.ndarray,
            act: tuple[int, float, float], cols: np.ndarray | None, fill_columns=None,
            packed: panels.PackedWeight | StripWeight | None = None, residual: np.ndarray | None = None) -> None:
        """``out`` [OC, OH, OW] = act(conv(``x`` [C, H, W]) + bias [+ residual]) on ``team``;
        ``cols`` of :attr:`cols_shape`; ``fill_columns(x, cols [K, OH, OW])`` replaces the team
        im2col of the untiled form when given; ``packed`` (from :meth:`pack`) replaces ``w2``
        and ``bias`` in a :attr:`panel` layer's GEMM; ``residual`` (shaped like ``out``, C
        order) only where :attr:`fuses_residual`, with ``packed``."""
        if residual is not None and not (self.fuses_residual and packed is not None):
            raise ValueError("this convolution's team form has no fused residual add (DenseTeamForm.fuses_residual)")
        kernels, ways, sgemm = team.kernels(), team.ways, team.sgemm
        oc = w2.shape[0]
        (oh, ow), pixels = self.out_hw, self.out_hw[0] * self.out_hw[1]
        if self.channel is not None:
            if packed is None:  # a weight given at call time
                packed = StripWeight.of(w2, bias)
            self.channel.run_team(packed, x, out, act, cols, ways, residual)
            return
        if self.direct is not None:
            if packed is None:  # a weight given at call time (a stem's is small: packing is cheap)
                packed = panels.PackedWeight.of(w2, bias)
            self.direct.run_team(packed, x, out, act, cols.reshape(self.direct.phases_shape), ways)
            return
        if self.pointwise:
            src = x.reshape(x.shape[0], -1)
        elif self.tiled:
            kernels.conv_tiles(x, w2, bias, out, *self.geometry, self.tile_rows, cols, *act, ways, sgemm)
            return
        else:
            image_cols = cols[0].reshape(-1, oh, ow)
            if fill_columns is None:
                kernels.im2col(x, image_cols, *self.geometry, ways)
            else:
                fill_columns(x, image_cols)
            src = image_cols.reshape(-1, pixels)
        if packed is not None:
            added = None if residual is None else residual.reshape(oc, pixels)
            packed.run_team(src, out.reshape(oc, pixels), act, ways, added)
            return
        kernels.gemm_bias_activation(w2, src, bias, out.reshape(oc, pixels), *act, ways, self.by_columns, sgemm)


    def bind(self, team: Team, x: np.ndarray, w2: np.ndarray, bias: np.ndarray, out: np.ndarray,
             act: tuple[int, float, float], cols: np.ndarray | None,
             packed: panels.PackedWeight | StripWeight | None = None,
             residual: np.ndarray | None = None) -> Callable[[], None]:
        """:meth:`run` of every image of ``x`` [N, C, H, W] into ``out`` [N, OC, OH, OW] (plus
        ``residual`` of the output's shape, where :meth:`run` takes one) as a zero-argument
        call for these very arrays (a 1x1 layer on the panel GEMM: the compiled kernel's call
        with its arguments gathered; the others :meth:`run` per image). The caller checks
        ``team.usable()``."""
        oc, pixels = w2.shape[0], self.out_hw[0] * self.out_hw[1]
        added = [None] * x.shape[0] if residual is None else [residual[i] for i in range(x.shape[0])]
        if self.pointwise and packed is not None:
            calls = [packed.bind_team(x[i].reshape(x.shape[1], -1), out[i].reshape(oc, pixels), act, team.ways,
                                      None if added[i] is None else added[i].reshape(oc, pixels))
                     for i in range(x.shape[0])]
        else:
            calls = [partial(self.run, team, x[i], w2, bias, out[i], act, cols, None, packed, added[i])
                     for i in range(x.shape[0])]
        return sequence(*calls)


def depthwise_scratch(algorithm: str, in_hw, out_hw, kernel: int, stride: int, padding,
                      ways: int) -> tuple[np.ndarray | None, tuple | None]:
    """What :func:`run_depthwise` needs besides the layer: the blocked kernel's pixel table (or
    None) and the shape of the per-thread scratch (or None; ``depthwise_rows``: its zero row
    and masks)."""
    if algorithm == "depthwise3x3_s2":
        return None, (ways, 4 * out_hw[0] * out_hw[1])
    if algorithm == "depthwise_blocked":
        from .jit.dwblock import blocked_scratch, blocked_table

        geometry = (tuple(in_hw), tuple(out_hw), kernel, stride, tuple(padding)[:2])
        return blocked_table(*geometry), (ways, blocked_scratch(*geometry))
    if algorithm == "depthwise_rows":
        from .jit.dwrows import rows_scratch

        return None, (ways, rows_scratch(in_hw, out_hw, kernel, stride))
    return None, None


def plane_cuts(planes: int, channels: int, ways: int) -> list[int]:
    """``ways + 1`` cuts of ``planes`` (images x channels) into bands for the depthwise kernels,
    at whole blocks of 8 planes when ``channels`` is a multiple of 8 (``depthwise_blocked``
    runs a block cut in two as two partial blocks)."""
    unit = 8 if channels % 8 == 0 else 1
    return [planes // unit * j // ways * unit for j in range(ways)] + [planes]


def run_depthwise(team: Team, algorithm: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray, out: np.ndarray,
                  table: np.ndarray | None, scratch: np.ndarray | None, stride: int, padding,
                  act: tuple[int, float, float], blocks: np.ndarray | None = None,
                  means: np.ndarray | None = None) -> None:
    """A depthwise convolution of ``DEPTHWISE_ALGORITHMS`` in bands of planes on ``team``
    (``table`` and ``scratch`` from :func:`depthwise_scratch`; ``blocks``, for
    ``depthwise_blocked``, ``jit.depthwise.blocked_weights`` of ``w`` and ``bias``, if made;
    ``means``, float32 [N * C], where each output plane's mean is wanted too)."""
    bind_depthwise(team, algorithm, x, w, bias, out, table, scratch, stride, padding, act, blocks, means)()


def bind_depthwise(team: Team, algorithm: str, x: np.ndarray, w: np.ndarray, bias: np.ndarray, out: np.ndarray,
                   table: np.ndarray | None, scratch: np.ndarray | None, stride: int, padding,
                   act: tuple[int, float, float], blocks: np.ndarray | None = None,
                   means: np.ndarray | None = None) -> Callable[[], object]:
    """:func:`run_depthwise` on these very arrays as a zero-argument call: the team kernel with
    its arguments gathered (a bound call then reaches compiled code through no Python of ours)."""
    kernels, ways = team.kernels(), team.ways
    pt, pl = tuple(padding)[:2]
    means = NO_MEANS if means is None else means
    if algorithm == "depthwise3x3_same":
        return partial(kernels.depthwise3x3_same, x, w, bias, out, means, *act, ways)
    if algorithm == "depthwise3x3_s2":
        return partial(kernels.depthwise3x3_s2, x, w, bias, scratch, out, means, *act, ways)
    if algorithm == "depthwise_blocked":
        return partial(kernels.depthwise_blocked, x, w, bias, NO_BLOCKS if blocks is None else blocks, table, scratch,
                       out, means, stride, pt, pl, *act, ways)
    if algorithm == "depthwise_rows":
        return partial(kernels.depthwise_rows, x, w, bias, scratch, out, means, stride, pt, pl, *act, ways)
    raise ValueError(f"no team form for depthwise algorithm {algorithm!r}; expected one of {DEPTHWISE_ALGORITHMS}")


def winograd_shapes(c: int, oc: int, tiles: int, tiles_hw: tuple[int, int], ways: int) -> dict[str, tuple[int, ...]]:
    """Scratch shapes of :func:`run_winograd` for ``tiles`` 4x4 output tiles (a chunk of images)
    of maps of ``tiles_hw`` tile rows and columns: the transformed input ``v``, each thread's
    channel products ``m``, its input transform's ``scratch`` (``input_scratch_floats``) and
    its output transform's ``s``, ``y`` (``output_group_tiles``)."""
    tile_rows, tile_width = tiles_hw
    group = output_group_tiles(tile_width)
    count = -(-oc // 6)  # panels: the packed weight's bands are whole 6-channel panels
    rows = max(-(-oc // ways), 6 * -(-count // ways))
    return {"v": (36, c, tiles), "m": (ways, 36, rows, tiles),
            "scratch": (ways, input_scratch_floats(tile_rows, tile_width)),
            "s": (ways, 6, 4, group), "y": (ways, 4, 4, group)}


def winograd_weights(u: np.ndarray, tiles: int) -> np.ndarray | PackedTuples:
    """What :func:`run_winograd` multiplies for ``u`` = G g G^T [36, OC, C] over chunks of
    ``tiles`` tiles: ``u`` packed for the panel GEMM where :func:`.panels.tuples_fit` and
    ``u`` is read-only (a constant: packed once for every thread), else ``u`` itself (BLAS's
    sgemm)."""
    packed = PackedTuples.shared(u) if panels.tuples_fit(u.shape[2], tiles) else None
    return u if packed is None else packed


def run_winograd(team: Team, x: np.ndarray, u: np.ndarray | PackedTuples, bias: np.ndarray, out: np.ndarray,
                 padding, tiles_hw: tuple[int, int], act: tuple[int, float, float], buffers: dict[str, np.ndarray],
                 first: int, count: int, residual: np.ndarray | None = None) -> None:
    """Winograd F(4x4, 3x3) of images [first, first + count) on ``team`` (``u`` = G g G^T,
    [36, OC, C], or packed: :func:`winograd_weights`): the input transform in bands of input
    channels, then per band of output channels its 36 channel GEMMs and output transform —
    two regions. ``buffers`` has the arrays of :func:`winograd_shapes`; ``residual`` (shaped
    like ``out``, C order) is added before the activation."""
    kernels, ways = team.kernels(), team.ways
    (th, tw), (pt, pl) = tiles_hw, tuple(padding)[:2]
    b = buffers
    added = NO_RESIDUAL if residual is None else residual
    kernels.winograd_input(x, b["v"], pt, pl, th, tw, first, count, b["scratch"], ways)
    if isinstance(u, PackedTuples):
        kernels.winograd_panels_output(u.panels, u.zeros, b["v"], bias, out, b["m"], b["s"], b["y"], first, count, th,
                                       tw, *act, ways, u.columns, added)
    else:
        kernels.winograd_products_output(u, b["v"], bias, out, b["m"], b["s"], b["y"], first, count, th, tw, *act,
                                         ways, team.sgemm, added)
