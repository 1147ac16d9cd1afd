"""A convolution's weight ``[M, K]`` (output channels x rows of columns) packed once into
panels for the compiled panel GEMM (``jit.panel``), and where that beats BLAS's ``sgemm``
plus the epilogue pass: 1x1 layers, which read the image in place, and layers whose im2col
columns are few rows (stems) or few pixels (maps up to 28x28 on one thread, 7x7 on a team).

:class:`PackedBands` packs a fully-connected weight ``[K, N]`` the other way round, in bands
of 16 columns for a few rows of input (a batch slice's classifier: ``jit.panel.fc_rows``), or
of ``jit.panel.FC_WIDTH`` for many (a transformer's tokens: ``jit.panel.fc``).

Plain Python: packing is numpy; the kernels load (``jit.load("panel")``, numba) when a
:class:`PackedWeight` is made, i.e. while a backend binds a layer.

Measured on an AMD EPYC VM (Zen 3, AVX2), zoo shapes M x K x N (output channels x rows x
pixels), ReLU6 epilogue, best of 25-75 calls, sgemm + epilogue / panel GEMM:

- one thread, K <= 128: 96x16x12544 1.32-1.34, 16x32x12544 1.18-1.23, 144x24x3136 1.17,
  192x32x784 1.17, 240x40x784 1.13, 40x27x12544 1.19, 576x96x196 1.02-1.24, 128x64x784 1.01,
  256x64x3136 0.98; 128 < K <= 256 at parity or below (24x144x3136 1.01-1.16, 1024x256x196
  0.89-0.95, 64x147x12544 — ResNet's stem — 0.88); from 480 on 0.90-0.98;
- two threads (a team region against two sgemm bands, each with its epilogue): 1.07-1.81
  on all shapes below 512 rows; 96x576x196 0.95, 256x1024x196 0.98, 1024x256x196 0.99; at
  49 pixels 1.07-1.11 (960x160, 320x960, 2048x512, 1152x192) and 512x4608x49 (ResNet's 7x7
  3x3 layers) 1.08 in an earlier prototype of the same kernel.
- since the image is copied into strips for calls over many panels (``jit.panel``), a whole
  layer on small maps: in the models, batch 8 (slices of 4 images on the two workers, where a
  map under 1024 pixels was otherwise one sgemm over the slice's images and a transpose),
  two handles, calls alternating, both creation orders, best / median of 30, panel GEMM on
  maps of at most 784 pixels / off: glow_like MobileNetV2 0.82 / 0.81 and 0.93 / 0.89,
  EfficientNet-B0 0.96 / 0.94 and 0.97 / 0.94, ResNet-50 0.94 / 0.97 and 0.99 / 0.98,
  ResNet-18 0.98 / 0.99 and 0.91 / 0.97; ``[nnpack, glow_like]`` 0.94-1.01 / 0.92-0.99.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from .aligned import thread_buffer
from .calls import sequence
from .jit import vectors
from .split import split

SERIAL_MAX_INPUTS = 128  # one thread: the panel GEMM up to this many rows of columns, or any
SERIAL_ANY_PIXELS = 784  # on maps of at most this many pixels (28x28 and smaller)
TEAM_MAX_INPUTS = 512  # a team region: below this many, or any for at most TEAM_ANY_PIXELS
TEAM_ANY_PIXELS = 128
# An im2col layer with at most TILE_MAX_INPUTS rows of columns (the stems) whose column matrix
# is over twice TILE_BYTES runs in row tiles of about TILE_BYTES of columns (``tile_rows``).
TILE_MAX_INPUTS = 256
TILE_BYTES = 256 * 1024


# Where the CPU runs 512-bit vectors at full width (AVX-512 on Intel's server cores) and the
# panel GEMM's kernel works in 8-float vectors (its 6 x 16 tile: numba compiles for a generic
# CPU), BLAS's sgemm uses them and the panel GEMM loses nearly everywhere: Intel Xeon VM
# (AVX-512, AMX), 2 cores, MKL 2026.2, the shapes above, sgemm + epilogue / panel GEMM — two
# threads 0.54-0.86 on all but 64x192x196 (1.07), ResNet's stem 0.72; one thread 0.59-0.90
# but 96x16x12544 (1.30) and 144x24x3136 (1.00). There it takes only the 1x1 layers of at
# most this many input channels on one thread, and no stems in tiles.
WIDE_SERIAL_MAX_INPUTS = 16
RULES_ENV = "LOWERKIT_PANEL_RULES"  # one of RULE_SETS: these rules whatever the CPU
# The 6 x 16 tile's rules (AVX2), those of full-width AVX-512 with that tile, the 6 x 32 tile's.
RULE_SETS = ("avx2", "avx512", "wide")


def rules() -> str:
    """Which of :data:`RULE_SETS` decides where the panel GEMM runs: ``$LOWERKIT_PANEL_RULES``
    (read every call), else ``wide`` where the kernels have the 6 x 32 tile (``jit.panel.TILE``:
    AVX-512VL's 32 registers; 16-float vectors where the CPU runs them at full width, see
    ``jit.panel.LANES``), ``avx512`` on a CPU with full-width AVX-512 without it, ``avx2``
    elsewhere — asked once; loads the kernels (numba), as binding a layer does."""
    chosen = os.environ.get(RULES_ENV, "")
    if chosen in RULE_SETS:
        return chosen
    if not _RULES:
        from . import jit

        try:
            tile = jit.load("panel").TILE
        except ImportError:  # no numba: no panel GEMM either; the rules then only steer sgemm's forms
            tile = 16
        _RULES.append("wide" if tile == 32 else "avx512" if vectors.host_full_width() else "avx2")
    return _RULES[0]


_RULES: list[str] = []


def wide_vectors() -> bool:
    """Whether the rules are those of a CPU with full-width AVX-512 whose panel GEMM works in
    8-float vectors (:func:`rules` ``avx512``): BLAS's sgemm takes nearly every layer."""
    return rules() == "avx512"


def wide_tile() -> bool:
    """Whether the rules are the 6 x 32 tile's (:func:`rules` ``wide``): the panel GEMM takes
    every layer (see :func:`fits`)."""
    return rules() == "wide"


def fits(k: int, pixels: int, team: bool) -> bool:
    """Whether the panel GEMM runs a convolution whose GEMM has ``k`` rows of columns (input
    channels of a 1x1 layer) over ``pixels`` outputs per image, on a team region or on one
    thread (the measurements above): on one thread up to 128 rows, or any on maps of at most
    784 pixels; on a team below 512 rows, or any on maps of at most 128 pixels. On a CPU with
    :func:`wide_vectors`, only on one thread up to :data:`WIDE_SERIAL_MAX_INPUTS` rows. With
    the :func:`wide_tile`, every layer, on one thread or a team: ``benchmarks/panel.py`` on the
    zoo's shapes and the ones the rules above leave to sgemm (64x256x3136, 128x1152x784,
    1024x512x196, ...), Zen 4 VM, panel / sgemm + epilogue 1.04-1.78 on one thread and
    1.04-1.42 on two."""
    if wide_vectors():
        return not team and k <= WIDE_SERIAL_MAX_INPUTS
    if wide_tile():
        return True
    if team:
        return k < TEAM_MAX_INPUTS or pixels <= TEAM_ANY_PIXELS
    return k <= SERIAL_MAX_INPUTS or pixels <= SERIAL_ANY_PIXELS


def tile_rows(k: int, out_hw: tuple[int, int]) -> int:
    """Output rows per tile where an im2col layer of ``k`` rows of columns over ``out_hw``
    runs on one thread in row tiles on the panel GEMM (``PackedWeight.run_tiles``), else 0:
    the column matrix of a whole image (7.4 MB for ResNet's 7x7 stem)
    is written and then read back from memory, while a tile's (~``TILE_BYTES``) is multiplied
    while still in cache. One image, ReLU, same process, best of 30, µs, whole column matrix
    / tiles: ResNet's stem 3->64 7x7/2 at 224 3814-3817 (sgemm and the epilogue pass, as
    ``fits`` chooses; the panel GEMM 3234-3286) / 3019-3021; MobileNetV2's 3->32 3x3/2 386-410
    / 375-377. With many rows of columns a tile holds too few pixels to pay for streaming the
    weight once per tile: 128->128 3x3/2 at 56, 2976 / 3826 (K = 1152). A team region keeps one
    im2col and the panel GEMM's bands: tiles there gained ~10% on the stems (ResNet's 1718 ->
    1536 µs on two threads) but their parallel entry point cost 13 s of first-ever compile."""
    oh, ow = out_hw
    if k > TILE_MAX_INPUTS or 4 * k * oh * ow <= 2 * TILE_BYTES or wide_vectors():
        return 0
    return max(1, min(oh, TILE_BYTES // (4 * k * ow)))


def block_columns(k: int) -> int:
    """Columns of the image the kernel multiplies by every panel before moving on (a multiple
    of 16): 128 for at most 32 inputs, else 64. One thread, 16 to 256 columns and unblocked
    over 17 zoo shapes: 64 was within 5% of the best on 14; 16 or 32 columns lost up to 34%
    where the inputs are few (96x16x12544), no blocks up to 27% (the image block leaves L1).
    Copying each block into a contiguous buffer first (as BLAS packs) gained nothing with few
    panels but on 64x147x12544 (ResNet's stem, 0.89 -> 0.98 of sgemm's speed), whose image
    rows, 49 KB apart, fall into the same few L1 sets; the kernel copies into strips only for
    calls over many panels (``jit.panel.PACK_PANELS``)."""
    return 128 if k <= 32 else 64


# A team splits an image's columns where it has at least this many for each row of the weight,
# else the weight's panels. MobileNetV2 at batch 1 on the Zen 4 VM, every 1x1 layer flipped
# (my script): per layer 0.95-1.20 of the time, 1.07 in total.
COLUMNS_PER_ROW = 1
# ... and a gated layer (a squeeze-excitation gate folded into the weight) from this many: with
# columns, each thread scales the whole weight into its copy; with panels, only its half.
GATED_COLUMNS_PER_ROW = 4


@dataclass(frozen=True, eq=False)
class PackedWeight:
    """``w`` [M, K] in panels of ``jit.panel.ROWS`` (6) rows (``panels[p][k, r] = w[6p + r,
    k]``, rows past M zero) and its bias [panels * 6] (zeros without one), flat float32, each
    followed by the ``jit.panel.PAD`` floats the kernels may read; :meth:`run` and
    :meth:`run_team` compute ``out = act(w @ x + bias)`` for ``x`` [K, N] and ``out`` [M, N]
    (C order, float32)."""

    panels: np.ndarray
    bias: np.ndarray
    m: int
    k: int
    columns: int  # block_columns(k)
    count: int  # panels
    kernels: object  # the jit.panel module

    @classmethod
    def of(cls, w: np.ndarray, bias: np.ndarray | None) -> PackedWeight:
        """``w`` [M, ...] (a convolution's weight: M rows of K = the rest) and ``bias`` [M] or
        None, packed now."""
        from . import jit

        kernels = jit.load("panel")
        rows, pad = kernels.ROWS, kernels.PAD
        w = w.reshape(w.shape[0], -1)
        m, k = w.shape
        count = -(-m // rows)
        padded = np.zeros((count * rows, k), np.float32)
        padded[:m] = w
        panels = np.zeros(count * k * rows + pad, np.float32)
        panels[: count * k * rows] = padded.reshape(count, rows, k).transpose(0, 2, 1).reshape(-1)
        b = np.zeros(count * rows + pad, np.float32)
        if bias is not None and bias.size:
            b[:m] = bias.reshape(-1)
        return cls(panels, b, m, k, block_columns(k), count, kernels)

    @classmethod
    def shared(cls, w: np.ndarray, bias: np.ndarray | None) -> PackedWeight | None:
        """:meth:`of` for a constant weight and bias — read-only arrays, as a backend keeps its
        constants —, packed once for every thread that binds the same ``w`` (the same array
        object) with an equal bias, and kept while ``w`` lives. None when either array is
        writable: a weight or bias given at call time, whose values binding cannot see."""
        return _shared(cls, w, bias)

    def run(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
            residual: np.ndarray | None = None) -> None:
        """``out = act(w @ x + bias + residual)`` on the calling thread (``residual`` shaped like
        ``out``, C order, or None: a fused residual add)."""
        self.kernels.gemm(self.panels, self.bias, x, out, self._strips(1, x.shape[1]), self.k, self.m, self.columns,
                          *act, 0, self.count, 0, x.shape[1], _added(residual, 2))

    def run_images(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                   residual: np.ndarray | None = None) -> None:
        """:meth:`run` for every image of ``x`` [N, K, P] into ``out`` [N, M, P], in one call
        into compiled code."""
        self.kernels.gemm_images(self.panels, self.bias, x, out, self._strips(1, x.shape[2]), self.k, self.m,
                                 self.columns, *act, _added(residual, 3))

    def by_columns(self, columns: int, gated: bool = False) -> bool:
        """Whether a team region over an image of this many ``columns`` splits them (each thread
        then reads part of the image and all the weight) rather than the panels (all the image,
        part of the weight): where the image has at least :data:`COLUMNS_PER_ROW` columns for
        each row of the weight (:data:`GATED_COLUMNS_PER_ROW` for a ``gated`` layer)."""
        return columns >= (GATED_COLUMNS_PER_ROW if gated else COLUMNS_PER_ROW) * self.m

    def run_team(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float], ways: int,
                 residual: np.ndarray | None = None) -> None:
        """The same as one team region, in bands of columns or of panels (:meth:`by_columns`)."""
        self.kernels.team_gemm(self.panels, self.bias, x, out, self._strips(ways, x.shape[1]), self.k, self.m,
                               self.columns, *act, ways, self.by_columns(x.shape[1]), _added(residual, 2))

    def gated_copies(self, ways: int) -> np.ndarray:
        """Scratch for :meth:`run_team_gated`: one copy of the packed weight per thread (its
        values need no initialising)."""
        return np.empty((ways, self.panels.size), np.float32)

    def run_team_gated(self, gate: np.ndarray, copies: np.ndarray, x: np.ndarray, out: np.ndarray,
                       act: tuple[int, float, float], ways: int, residual: np.ndarray | None = None) -> None:
        """:meth:`run_team` of the weight with its columns scaled by ``gate`` [K] (``out =
        act((w * gate) @ x + bias)``), each thread scaling the panels it multiplies into its
        own row of ``copies`` (:meth:`gated_copies`)."""
        self.kernels.team_gated_gemm(self.panels, gate, copies, self.bias, x, out, self._strips(ways, x.shape[1]),
                                     self.k, self.m, self.columns, *act, ways, self.by_columns(x.shape[1], True),
                                     _added(residual, 2))

    def bind_team_gated(self, gates: np.ndarray, copies: np.ndarray, x: np.ndarray, out: np.ndarray,
                        act: tuple[int, float, float], ways: int,
                        residual: np.ndarray | None = None) -> Callable[[], None]:
        """:meth:`run_team_gated` of every image as a zero-argument call for these arrays (see
        :meth:`bind`): ``gates`` [N, K], ``x`` [N, K, P], ``out`` and ``residual`` [N, M, P],
        one region per image."""
        return sequence(*[
            self._bound(self.kernels.team_gated_gemm, (self.panels, gates[i], copies, self.bias, x[i], out[i]), ways,
                        (self.k, self.m, self.columns, *act, ways, self.by_columns(x.shape[2], True),
                         _added(None if residual is None else residual[i], 2)), x.shape[2])
            for i in range(x.shape[0])])

    def bind_gated_images(self, gates: np.ndarray, x: np.ndarray, out: np.ndarray,
                          act: tuple[int, float, float]) -> Callable[[], None]:
        """:meth:`run_images` of the weight with its columns scaled by each image's gate, as a
        zero-argument call on the calling thread: ``gates`` [N, K], ``x`` [N, K, P], ``out``
        [N, M, P]. Per image the packed panels are scaled into a copy bound here (one per
        bound call: a handle's threads each bind their own), then multiplied with its tiles,
        every image in one call into compiled code (``jit.panel.gated_gemm_images``)."""
        scaled = np.empty(self.panels.size, np.float32)
        return self._bound(self.kernels.gated_gemm_images, (self.panels, gates, scaled, self.bias, x, out), 1,
                           (self.k, self.m, self.columns, *act), x.shape[2])

    def bind(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
             residual: np.ndarray | None = None) -> Callable[[], None]:
        """:meth:`run` on these arrays as a zero-argument call (for a caller that runs the same
        arrays again and again: the kernel's arguments are gathered once)."""
        return self._bound(self.kernels.gemm, (self.panels, self.bias, x, out), 1,
                           (self.k, self.m, self.columns, *act, 0, self.count, 0, x.shape[1], _added(residual, 2)),
                           x.shape[1])

    def bind_images(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                    residual: np.ndarray | None = None) -> Callable[[], None]:
        """:meth:`run_images` on these arrays as a zero-argument call (see :meth:`bind`)."""
        return self._bound(self.kernels.gemm_images, (self.panels, self.bias, x, out), 1,
                           (self.k, self.m, self.columns, *act, _added(residual, 3)), x.shape[2])

    def bind_team(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                  ways: int, residual: np.ndarray | None = None) -> Callable[[], None]:
        """:meth:`run_team` on these arrays as a zero-argument call (see :meth:`bind`)."""
        return self._bound(self.kernels.team_gemm, (self.panels, self.bias, x, out), ways,
                           (self.k, self.m, self.columns, *act, ways, self.by_columns(x.shape[1]), _added(residual, 2)),
                           x.shape[1])

    def run_tiles(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float], geometry: tuple[int, ...],
                  rows: int, cols: np.ndarray, residual: np.ndarray | None = None) -> None:
        """``out`` [M, OH, OW] = act(conv(``x`` [C, H, W]) + bias + residual) on the calling thread,
        ``rows`` output rows at a time (:func:`tile_rows`): each tile's columns by the compiled
        im2col into ``cols`` (at least K * rows * OW floats), multiplied while in cache.
        ``geometry`` is (kh, kw, sh, sw, pad top, pad left, dh, dw)."""
        self.kernels.conv_tiles(self.panels, self.bias, x, out, cols, self._strips(1, rows * out.shape[2]), self.k,
                                self.m, self.columns, *act, *geometry, rows, 0, out.shape[1], _added(residual, 3))

    def _copies(self, columns: int) -> bool:
        """Whether the kernel copies an image of ``columns`` columns into strips (the narrow
        tile; many panels and rows, or enough panels over rows ``jit.panel.ALIASING_BYTES`` apart)."""
        k = self.kernels
        return k.PACKS and ((self.count >= k.PACK_PANELS and self.k >= k.PACK_INPUTS)
                            or (self.count >= k.ALIASING_PANELS and (4 * columns) % k.ALIASING_BYTES == 0))

    def _strips(self, ways: int, columns: int) -> np.ndarray:
        """The calling thread's scratch for the kernel's copy of an image of ``columns``
        columns, for ``ways`` threads (empty where it does not copy)."""
        return strips(ways * self.kernels.STRIP_FLOATS) if self._copies(columns) else _NO_STRIPS

    def _bound(self, kernel: Callable, head: tuple, ways: int, tail: tuple, columns: int) -> Callable[[], None]:
        """``kernel(*head, strips, *tail)`` as a zero-argument call, ``strips`` as
        :meth:`_strips` gives them. Where the kernel copies the image, they are looked up at
        every call: a call bound on one thread runs on another (a batch slice's worker), and
        two workers copying into one thread's strips would overwrite each other's image."""
        if not self._copies(columns):
            return partial(kernel, *head, _NO_STRIPS, *tail)
        floats = ways * self.kernels.STRIP_FLOATS

        def call() -> None:
            kernel(*head, strips(floats), *tail)
        return call


_NO_STRIPS = np.empty(0, np.float32)
_NO_RESIDUAL = {rank: np.empty((0,) * rank, np.float32) for rank in (2, 3)}


def _added(residual: np.ndarray | None, rank: int) -> np.ndarray:
    """The kernels' residual argument: the array, or an empty one of ``rank`` for none."""
    return _NO_RESIDUAL[rank] if residual is None else residual


def strips(floats: int) -> np.ndarray:
    """The calling thread's scratch of at least ``floats`` float32s for the panel GEMM's copy
    of the image — grown when a call needs more, then reused: steady-state calls allocate
    nothing (one thread runs one kernel at a time)."""
    return thread_buffer("panel_strips", floats)


# The shared packings (PackedWeight.shared, PackedBands.shared): (class, id(w), options) ->
# (weakref to w, the bias packed, the packing).
_SHARED: dict[tuple, tuple] = {}
_SHARED_LOCK = threading.Lock()


def _shared(cls, w: np.ndarray, bias: np.ndarray | None, make: Callable | None = None, **options):
    """``cls.of(w, bias, **options)`` (or ``make(w)``), made once for read-only ``w`` and
    ``bias`` (and these ``options``) and kept while ``w`` lives; None for a writable one (see
    :meth:`PackedWeight.shared`)."""
    if w.flags.writeable or (bias is not None and bias.flags.writeable):
        return None
    b = None if bias is None else np.array(bias, np.float32).reshape(-1)
    key = (cls, id(w), *sorted(options.items()))
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is not None and entry[0]() is w and _equal(entry[1], b):
            return entry[2]
        packed = cls.of(w, b, **options) if make is None else make(w)
        _SHARED[key] = (weakref.ref(w, lambda _, k=key: _SHARED.pop(k, None)), b, packed)
    return packed


# Winograd's 36 channel GEMMs ``U[a] @ V[a]`` on the panel GEMM (:class:`PackedTuples`): BLAS's
# sgemm packs its share of U on every call, and with few tiles (columns) that copy is most of
# the work — U is read from memory, written packed, read again, for a few dozen columns.
# ``benchmarks/winograd_tuples.py``, one thread, the 36 GEMMs of one band, U flushed from the
# caches and V in them, median ms, sgemm / panel (AMD EPYC Zen 4 VM, the wide tile), rows x
# inputs x tiles: 128x256x16 0.846 / 0.482 (ResNet's 256x14x14 layers at batch 1, one team
# thread's band), 64x128x49 0.500 / 0.318, 256x256x64 4.561 / 2.860 (a batch slice of four),
# 512x512x16 7.295 / 4.621, 128x128x196 3.086 / 2.660; sgemm held its own with 64 inputs over
# few tiles (32x64x196 0.305 / 0.343) and won over many (128x128x2048 32.7 / 39.3).
TUPLES_MIN_INPUTS = 128
TUPLES_MAX_COLUMNS = 256
# With the 6 x 16 tile on AVX2 (``rules`` "avx2"), the same benchmark on an AMD EPYC Zen 3 VM
# (hot / cold medians, panel / sgemm): the panel GEMM won wherever a tuple of V (inputs x
# tiles) held at most 25,088 floats, 98 KB: 256x256x16 0.45, 512x512x16 0.62, 128x128x49
# 0.66-0.74, 256x256x64 0.83, 64x64x196 0.87-0.93, 32x64x196 0.84-0.93, 128x128x196 0.94,
# 64x32x784 0.74-0.77; beyond it sgemm held its own or won (512x512x64 0.99-1.00, 64x64x784
# 0.98-0.99, 256x256x196 1.04-1.05, 32x32x2048 1.24-1.28, 64x64x2048 1.73-1.81).
TUPLES_AVX2_MAX_FLOATS = 25_088
TUPLES_AVX2_MIN_INPUTS = 32  # the fewest measured
TUPLES_ENV = "LOWERKIT_WINOGRAD_PANELS"  # "0": Winograd's channel GEMMs stay on sgemm


def tuples_fit(c: int, columns: int) -> bool:
    """Whether Winograd's channel GEMMs of ``c`` input channels over ``columns`` tiles (a chunk
    of images) run on :class:`PackedTuples` (the measurements above): with the
    :func:`wide_tile`, at least :data:`TUPLES_MIN_INPUTS` inputs and at most
    :data:`TUPLES_MAX_COLUMNS` tiles; with the rules ``avx2``, at least
    :data:`TUPLES_AVX2_MIN_INPUTS` inputs and at most :data:`TUPLES_AVX2_MAX_FLOATS` in a tuple
    of the transformed input (inputs x tiles); never with the rules ``avx512`` (not measured);
    nowhere when ``$LOWERKIT_WINOGRAD_PANELS`` is ``0`` (read when a layer binds; nnpack's
    unbound calls ask on each call)."""
    if os.environ.get(TUPLES_ENV) == "0":
        return False
    chosen = rules()
    if chosen == "wide":
        return c >= TUPLES_MIN_INPUTS and columns <= TUPLES_MAX_COLUMNS
    return chosen == "avx2" and c >= TUPLES_AVX2_MIN_INPUTS and c * columns <= TUPLES_AVX2_MAX_FLOATS


@dataclass(frozen=True, eq=False)
class PackedTuples:
    """Winograd's transformed weight ``U`` [36, OC, C] packed once for the panel GEMM: each of
    its 36 ``[OC, C]`` matrices in panels as :class:`PackedWeight` packs a weight, one after
    the other (``count`` panels each), then ``jit.panel.PAD`` floats; ``zeros`` is the bias the
    kernel starts from. ``jit.panel.tuple_gemms`` multiplies a band of panels of every tuple
    (the serial form: all of them), ``jit.team.winograd_panels_output`` bands of them as one
    team region, each followed by the band's output transform."""

    panels: np.ndarray
    zeros: np.ndarray
    m: int  # output channels
    k: int  # input channels
    columns: int  # block_columns(k)
    count: int  # panels per tuple
    kernels: object  # the jit.panel module

    @classmethod
    def of(cls, u: np.ndarray) -> PackedTuples:
        """``u`` [36, OC, C], packed now."""
        from . import jit

        kernels = jit.load("panel")
        rows, pad = kernels.ROWS, kernels.PAD
        tuples, m, k = u.shape
        count = -(-m // rows)
        padded = np.zeros((tuples, count * rows, k), np.float32)
        padded[:, :m] = u
        panels = np.zeros(tuples * count * k * rows + pad, np.float32)
        panels[: tuples * count * k * rows] = padded.reshape(tuples, count, rows, k).transpose(0, 1, 3, 2).reshape(-1)
        return cls(panels, np.zeros(count * rows + pad, np.float32), m, k, block_columns(k), count, kernels)

    @classmethod
    def shared(cls, u: np.ndarray) -> PackedTuples | None:
        """:meth:`of`, once for every thread binding the same read-only ``u``; None for a
        writable one."""
        return _shared(cls, u, None, cls.of)

    def bands(self, ways: int) -> list[tuple[int, int]]:
        """Up to ``ways`` bands of output channels ``(first, last)``, each whole panels."""
        rows = self.kernels.ROWS
        return [(rows * b.start, min(self.m, rows * b.stop)) for b in split(self.count, ways)]

    def takes(self, first: int, last: int) -> bool:
        """Whether output channels [first, last) are whole panels (what :meth:`run` computes)."""
        rows = self.kernels.ROWS
        return first % rows == 0 and (last % rows == 0 or last == self.m)

    def run(self, v: np.ndarray, m: np.ndarray, columns: int, first: int = 0, last: int | None = None) -> None:
        """Output channels [first, last) (whole panels, :meth:`takes`; by default all) of ``U[a]
        @ v[a][:, :columns]`` into rows 0.. of ``m[a]`` for the 36 tuples, on the calling thread
        (``v`` [36, C, T], ``m`` [36, rows, T], C order; columns past ``columns`` untouched)."""
        rows = self.kernels.ROWS
        last = self.m if last is None else last
        self.kernels.tuple_gemms(self.panels, self.zeros, v, m, self.k, self.m, self.columns, first // rows,
                                 -(-last // rows), columns)


# A team's fully-connected layer of many rows splits the bands between its threads (each reads
# part of the weight, all copy every row) where the weight is this many times the rows' size,
# else the rows (each reads all the weight, copies only its rows).
FC_COLUMNS_WEIGHT_PER_INPUT = 4
BANDS_MIN_WEIGHTS = 65_536  # below, the weight sits in cache and BLAS's copy of it costs little
BANDS_MAX_ROWS = 6  # jit.panel.ROWS: one row panel (this rule is asked before any kernel loads)


def bands_fit(rows: int, w: np.ndarray) -> bool:
    """Whether ``x [rows, K] @ w [K, N]`` runs on :class:`PackedBands` on one thread: 2 to
    ``BANDS_MAX_ROWS`` rows — a batch slice's fully-connected layer — and a weight of at
    least ``BANDS_MIN_WEIGHTS``. One row stays on BLAS's ``gemv``, which reads the weight once
    too (on a team it takes :meth:`PackedBands.run_team`: ``team_layers.row_on_team``)."""
    return 2 <= rows <= BANDS_MAX_ROWS and w.size >= BANDS_MIN_WEIGHTS


def rows_fit(rows: int) -> bool:
    """Whether a team's ``x [rows, K] @ w`` on a constant weight runs on
    :meth:`PackedBands.run_rows_team` rather than ``sgemm`` bands: more rows than
    :func:`bands_fit` takes (7 or more; one row has :meth:`PackedBands.run_team`)."""
    return rows > BANDS_MAX_ROWS


@dataclass(frozen=True, eq=False)
class PackedBands:
    """A fully-connected weight ``w`` [K, N] (``y = x @ w + bias``) packed once in bands of
    ``width`` columns (``jit.panel.pack_bands``). For a few rows of ``x`` (:meth:`run`,
    :meth:`run_team`: 16 columns, ``jit.panel.fc_rows``) BLAS's ``sgemm`` first copies the
    whole weight (a 5 MB weight from memory: 0.56-0.70 ms for 2-6 rows, one thread), where the
    bands stream it once, prefetched (0.24-0.26 ms). Many rows (:meth:`run_rows`,
    :meth:`run_rows_team`) take bands of ``jit.panel.FC_WIDTH``: packed with ``many_rows``."""

    bands: np.ndarray
    bias: np.ndarray  # [N], or empty
    k: int
    n: int
    kernels: object  # the jit.panel module
    width: int  # columns per band

    @classmethod
    def of(cls, w: np.ndarray, bias: np.ndarray | None, many_rows: bool = False) -> PackedBands:
        """``w`` [K, N] and ``bias`` [N] or None, packed now: for the few-row methods, or with
        ``many_rows`` for :meth:`run_rows` and :meth:`run_rows_team`."""
        from . import jit

        kernels = jit.load("panel")
        b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
        width = kernels.FC_WIDTH if many_rows else 16
        return cls(kernels.pack_bands(np.asarray(w, np.float32), width), b, w.shape[0], w.shape[1], kernels, width)

    @classmethod
    def shared(cls, w: np.ndarray, bias: np.ndarray | None, many_rows: bool = False) -> PackedBands | None:
        """:meth:`of`, once for every thread binding the same read-only ``w`` (as
        :meth:`PackedWeight.shared`); None for a writable weight or bias."""
        return _shared(cls, w, bias, many_rows=many_rows)

    def run(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float]) -> None:
        """``out`` [R, N] = act(``x`` [R, K] @ w + bias) on the calling thread (C-contiguous
        float32, 2 <= R <= 6)."""
        self._require_width(16, "the few-row kernels")
        scratch = _row_panel(self.k * self.kernels.ROWS + self.kernels.PAD)
        self.kernels.fc_rows(x, self.bands, self.bias, out, scratch, *act)

    def run_team(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float], ways: int) -> None:
        """:meth:`run` as one team region (``jit.panel.team_fc_rows``), for 1 <= R <= 6: each
        thread streams its share of the bands. A model's one-row classifier at batch 1, where
        BLAS's ``gemv`` reads the whole weight on one thread: MobileNetV2's 1280x1000 after 24
        MB of other data, 0.12 ms against gemv's 0.20 (2048x1000: 0.19 against 0.32; AMD
        EPYC Zen 4 VM, two threads)."""
        self._require_width(16, "the few-row kernels")
        floats = self.k * self.kernels.ROWS + self.kernels.PAD
        scratch = _row_panel(ways * floats)[: ways * floats].reshape(ways, floats)
        self.kernels.team_fc_rows(x, self.bands, self.bias, out, scratch, *act, ways)

    def run_rows(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                 residual: np.ndarray | None = None) -> None:
        """``out`` [R, N] = act(``x`` [R, K] @ w + bias + ``residual``) for any R on the calling
        thread (``jit.panel.fc``: six rows at a time, read in place, against the bands;
        C-contiguous float32; ``residual`` [R, N] or None: a fused residual add)."""
        self._require_width(self.kernels.FC_WIDTH, "the many-row kernels")
        self.kernels.fc(x, self.bands, self.bias, out, *act, _added(residual, 2))

    def by_columns(self, rows: int) -> bool:
        """Whether :meth:`run_rows_team` over ``rows`` rows splits the bands between the
        threads rather than the rows: where the weight is over ``FC_COLUMNS_WEIGHT_PER_INPUT``
        times the rows' size (each thread then reads only its part of it)."""
        return self.n > FC_COLUMNS_WEIGHT_PER_INPUT * rows  # K x N against R x K

    def run_rows_team(self, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float], ways: int,
                      residual: np.ndarray | None = None) -> None:
        """:meth:`run_rows` as one team region (``jit.panel.team_fc``): shares of the rows, or
        of the bands (:meth:`by_columns`)."""
        self._require_width(self.kernels.FC_WIDTH, "the many-row kernels")
        self.kernels.team_fc(x, self.bands, self.bias, out, *act, ways, self.by_columns(x.shape[0]),
                             _added(residual, 2))

    def _require_width(self, width: int, kernels: str) -> None:
        """Raise unless these bands are ``width`` columns wide, as ``kernels`` read them (where
        ``jit.panel.FC_WIDTH`` is 16 one packing serves both families)."""
        if self.width != width:
            raise ValueError(f"PackedBands: {kernels} read bands of {width} columns, these are {self.width} wide "
                             f"(pack with many_rows={width != 16})")


def _row_panel(floats: int) -> np.ndarray:
    """The calling thread's scratch for :meth:`PackedBands.run`'s copy of its rows (grown, then
    reused: steady-state calls allocate nothing)."""
    return thread_buffer("panel_rows", floats)


def _equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
