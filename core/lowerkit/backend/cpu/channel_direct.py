"""Dense convolutions of many input channels as direct convolutions with the output channels in
the vector lanes (``jit.channel_direct``): no column matrix, the image padded once, each tap
of each pixel an address. What im2col costs most — stride 2, where the column matrix is a
strided copy four times the image, and small maps — goes with it.

Plain Python: the rule (:func:`fits`), the weight packed in strips (:class:`StripWeight`)
and a layer's geometry (:class:`ChannelDirectConv`: its tap and pixel tables, its padded
shape). The kernels load (``jit.load("channel_direct")``) when a :class:`ChannelDirectConv`
or a :class:`StripWeight` is made, i.e. while a backend binds a layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from . import panels
from .aligned import aligned_empty, thread_buffer
from .direct import MAX_CHANNELS as STEM_CHANNELS

# Rows of columns (C*KH*KW) from which a layer runs here. Measured from 576 (ResNet-18's
# 64->128 3x3/2) to 4608 (512-channel 3x3 layers); below, the stems' direct kernel or the
# panel GEMM, unmeasured against this one.
MIN_INPUTS = 256
SWITCH_ENV = "LOWERKIT_CHANNEL_DIRECT"  # "0": never (the layers keep im2col and the panel GEMM)
# With 16 vector registers (the ``avx2`` rules) the tile is 6 pixels x 16 channels, and it
# takes strided layers only. One image against im2col then the panel GEMM, ReLU, calls
# alternating, median of 40 paired ratios (AMD EPYC Zen 3 VM): the 3x3/2 layers of
# ResNet-18/50 (64->128 at 56 to 512->512 at 14) one thread 0.82-0.94, two threads
# 0.60-0.94, four images on one thread 0.77-0.92; ResNet-50 at batch 4 on one thread
# (benchmarks/per_node.py) layer2.0.conv2 14.2 -> 11.3 ms, layer3.0.conv2 12.6 -> 11.5,
# layer4.0.conv2 13.2 -> 12.7. Stride 1 lost: 512->512 at 7x7 0.97-1.00 alone but in
# ResNet-18 at batch 1 on two threads 1.95 against 1.66 ms; 256->256 at 14x14 1.02-1.04.


def fits(c: int, kernel, groups: int = 1, stride=(1, 1)) -> bool:
    """Whether a convolution of ``c`` input channels with this ``kernel`` and ``stride`` runs
    here: dense, not 1x1 (a strided 1x1 layer's subsampled image on the panel GEMM won:
    ResNet-50's downsamples 1.02-1.07 ms there against 1.14-1.16), more input channels than a
    stem (``direct.MAX_CHANNELS``) and at least :data:`MIN_INPUTS` rows of columns; under the
    ``wide`` rules (AVX-512's 32 vector registers: the 7 x 64 tile) any stride, under the
    ``avx2`` ones (16 registers: the 6 x 16 tile) strided layers only (measured above);
    not under the ``avx512`` ones (unmeasured); not with ``$LOWERKIT_CHANNEL_DIRECT=0``."""
    kh, kw = tuple(kernel)
    rules = panels.rules()
    return (os.environ.get(SWITCH_ENV, "") != "0" and groups == 1 and kh * kw > 1 and c > STEM_CHANNELS
            and c * kh * kw >= MIN_INPUTS
            and (rules == "wide" or (rules == "avx2" and max(tuple(stride)) > 1)))


@dataclass(frozen=True, eq=False)
class StripWeight:
    """``w`` [M, K] in strips of ``jit.channel_direct.STRIP`` (64) output channels,
    ``strips[s, k, j] = w[64s + j, k]`` (channels past M zero), and its bias [strips * 64]
    (zeros without one), flat float32."""

    strips: np.ndarray
    bias: np.ndarray
    m: int
    k: int

    @classmethod
    def of(cls, w: np.ndarray, bias: np.ndarray | None) -> StripWeight:
        """``w`` [M, ...] (M rows of K = the rest) and ``bias`` [M] or None, packed now."""
        from . import jit

        width = jit.load("channel_direct").STRIP
        w = np.asarray(w, np.float32).reshape(w.shape[0], -1)
        m, k = w.shape
        count = -(-m // width)
        padded = np.zeros((count * width, k), np.float32)
        padded[:m] = w
        # On a cache line: each step's four 64-byte loads then never straddle two (with the
        # weight 16 bytes past one, from memory, a layer took 1.5-1.65x as long).
        strips = aligned_empty(count * k * width)
        strips.reshape(count, k, width)[...] = padded.reshape(count, width, k).transpose(0, 2, 1)
        b = aligned_empty(count * width)
        b[:] = 0.0
        if bias is not None and bias.size:
            b[:m] = np.asarray(bias, np.float32).reshape(-1)
        strips.flags.writeable = b.flags.writeable = False
        return cls(strips, b, m, k)

    @classmethod
    def shared(cls, w: np.ndarray, bias: np.ndarray | None) -> StripWeight | None:
        """:meth:`of` for a constant weight and bias, packed once for every thread that binds
        the same ``w``; None for a writable one (as ``panels.PackedWeight.shared``)."""
        return panels._shared(cls, w, bias)


_NONE_2D = np.empty((0, 0), np.float32)  # no residual (a team region's)
_NONE_3D = np.empty((0, 0, 0), np.float32)  # no residual, or no padded image (the serial kernel's)


def partial_sums(ways: int, floats: int) -> np.ndarray:
    """The calling thread's scratch for ``ways`` threads' partial sums of ``floats`` each
    (``aligned.thread_buffer``: grown once, then reused)."""
    return thread_buffer("channel_partials", ways * floats)[: ways * floats].reshape(ways, floats)


@dataclass(frozen=True, eq=False)
class ChannelDirectConv:
    """A layer's geometry: ``x`` [C, H, W] -> ``out`` [M, OH, OW]. ``padded_shape`` is the
    image as the kernel reads it, [C, HP, WP] (zeros around the image: top ``pt``, left ``pl``,
    and bottom and right as far as the taps reach), ``taps`` the offset of each (c, kh, kw)
    there, ``offs`` / ``pix`` each output pixel's offset there and index in the output, in
    whole tiles (the last repeats its last pixel). :meth:`run` and :meth:`run_team` take the
    weight as a :class:`StripWeight` and, where :attr:`pads`, a float32 scratch of
    :attr:`padded_shape` for the copy."""

    pt: int
    pl: int
    image_shape: tuple[int, int, int]
    padded_shape: tuple[int, int, int]
    taps: np.ndarray
    offs: np.ndarray
    pix: np.ndarray
    kernels: object  # the jit.channel_direct module

    @classmethod
    def of(cls, image_shape, kernel, stride, padding, dilation, out_hw) -> ChannelDirectConv:
        """The geometry of a layer over images of ``image_shape`` (C, H, W), its tables now."""
        from . import jit

        kernels = jit.load("channel_direct")
        c, h, w = (int(v) for v in image_shape)
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = (tuple(int(v) for v in t) for t in (kernel, stride, dilation, out_hw))
        pt, pl = int(padding[0]), int(padding[1])
        padded = (c, max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1), max(w + pl, (ow - 1) * sw + (kw - 1) * dw + 1))
        ci, i, j = np.meshgrid(np.arange(c), np.arange(kh) * dh, np.arange(kw) * dw, indexing="ij")
        taps = ((ci * padded[1] + i) * padded[2] + j).reshape(-1).astype(np.int64)
        q = np.arange(oh * ow)
        tiles = -(-q.size // kernels.PIXELS)
        offs = np.empty(tiles * kernels.PIXELS, np.int64)
        pix = np.full(tiles * kernels.PIXELS, q[-1], np.int64)
        offs[: q.size] = (q // ow) * sh * padded[2] + (q % ow) * sw
        offs[q.size:] = offs[q.size - 1]
        pix[: q.size] = q
        for table in (taps, offs, pix):
            table.flags.writeable = False
        return cls(pt, pl, (c, h, w), padded, taps, offs, pix, kernels)

    @property
    def pads(self) -> bool:
        """Whether the image is copied into a padded one (else read in place)."""
        return self.padded_shape != self.image_shape

    def _partials(self, ways: int) -> np.ndarray:
        k = self.kernels
        return partial_sums(ways, k.GROUP * k.PIXELS * k.STRIP)

    def run(self, weight: StripWeight, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
            padded: np.ndarray | None, residual: np.ndarray | None = None) -> None:
        """``out`` [N, M, OH, OW] = act(conv(``x`` [N, C, H, W]) + bias [+ ``residual``, shaped
        like ``out``]), every image on the calling thread (``padded``: the scratch for the
        padded copy, None where the image is read in place)."""
        n, m = out.shape[0], out.shape[1]
        res = _NONE_3D if residual is None else residual.reshape(n, m, -1)
        self.kernels.conv(weight.strips, weight.bias, x, padded if self.pads else _NONE_3D, out.reshape(n, m, -1),
                          res, self.taps, self.offs, self.pix, weight.m, self.pads, self.pt, self.pl, *act,
                          self._partials(1)[0])

    def run_team(self, weight: StripWeight, x: np.ndarray, out: np.ndarray, act: tuple[int, float, float],
                 padded: np.ndarray | None, ways: int, residual: np.ndarray | None = None) -> None:
        """One image, ``x`` [C, H, W] -> ``out`` [M, OH, OW] (plus ``residual`` of its shape), on
        ``ways`` threads: the padded copy in bands of rows (one region, where the image
        needs padding), then each thread's band of the tiles (or of the strips where they
        divide evenly and the weight is the larger: ``jit.channel_direct._share``)."""
        xp = x
        if self.pads:
            xp = padded.reshape(self.padded_shape)
            self.kernels.team_pad(x, xp, self.pt, self.pl, ways)
        m = out.shape[0]
        res = _NONE_2D if residual is None else residual.reshape(m, -1)
        self.kernels.team_conv(weight.strips, weight.bias, xp, out.reshape(m, -1), res, self.taps, self.offs, self.pix,
                               weight.m, *act, self._partials(ways), ways)
