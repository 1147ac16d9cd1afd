"""The channels-last depthwise pass around the compiled taps (plain Python: the kernels come in
as an argument, loaded by the caller with ``jit.load("conv")``), and the blocked kernel's
weight layout (:func:`blocked_weights`).

NCHW moves in and out with numpy's strided copies (faster than a scalar gather loop in the
kernel); the taps, bias and activation run compiled on the channel-innermost copy. A caller
whose arrays are stored channels-last (an NCHW view of NHWC memory) pays neither transpose:
the copy in becomes a row copy, and the kernel writes straight into the output's memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DepthwiseGeometry:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]  # top, left (bottom and right follow from the padded size)
    dilation: tuple[int, int]


def depthwise_cl_band(kernels, x: np.ndarray, wt: np.ndarray, bias: np.ndarray, out: np.ndarray,
                      xp: np.ndarray, acc: np.ndarray, geom: DepthwiseGeometry,
                      act: tuple[int, float, float], c0: int, c1: int, acc_is_out: bool = False) -> None:
    """Depthwise convolution of channels [c0, c1) of ``x`` [N, C, H, W] into ``out``.

    ``xp`` [N, Hp, Wp, C] is scratch; ``wt`` is [KH*KW, C]. ``acc`` [N, OH*OW, C] is scratch
    too, or, with ``acc_is_out``, the NHWC memory of a channels-last ``out`` (no copy out).
    """
    if c0 >= c1:
        return
    copy_in_channels_last(x, xp, geom, c0, c1)
    (kh, kw), (sh, sw), (dh, dw) = geom.kernel, geom.stride, geom.dilation
    kernels.depthwise_channels_last(xp, wt, bias, acc, out.shape[2], out.shape[3], kh, kw, sh, sw, dh, dw, *act,
                                    c0, c1)
    if not acc_is_out:
        copy_out_channels_last(acc, out, c0, c1)


def copy_in_channels_last(x: np.ndarray, xp: np.ndarray, geom: DepthwiseGeometry, c0: int, c1: int) -> None:
    """Channels [c0, c1) of ``x`` [N, C, H, W] into the zero-bordered ``xp`` [N, Hp, Wp, C]."""
    h, wd = x.shape[2], x.shape[3]
    hp, wp = xp.shape[1], xp.shape[2]
    pt, pl = geom.padding
    band = xp[:, :, :, c0:c1]
    rows, cols = max(0, min(h, hp - pt)), max(0, min(wd, wp - pl))  # input rows and columns windows read
    band[:, :pt] = 0
    band[:, pt + rows :] = 0
    band[:, pt : pt + rows, :pl] = 0
    band[:, pt : pt + rows, pl + cols :] = 0
    np.copyto(band[:, pt : pt + rows, pl : pl + cols], x[:, c0:c1, :rows, :cols].transpose(0, 2, 3, 1))


def copy_out_channels_last(acc: np.ndarray, out: np.ndarray, c0: int, c1: int) -> None:
    """Channels [c0, c1) of ``acc`` [N, OH*OW, C] into ``out`` [N, C, OH, OW]."""
    n, _, oh, ow = out.shape
    np.copyto(out[:, c0:c1], acc[:, :, c0:c1].reshape(n, oh, ow, c1 - c0).transpose(0, 3, 1, 2))


def blocked_weights(w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``w`` [C, 1, k, k] and ``bias`` ([C], or empty for none) as ``dwblock.depthwise_blocked``
    reads them, in blocks of 8 planes: float32 [ceil(C / 8), k * k + 1, 8], block b's row t
    tap t of channels 8b .. 8b + 7, its last row their bias (lanes past C repeat the last
    channel). Made when a layer is bound, not on every call."""
    c, taps = w.shape[0], w.shape[2] * w.shape[3]
    blocks = -(-c // 8)
    channels = np.minimum(np.arange(blocks * 8), c - 1)
    rows = np.empty((blocks * 8, taps + 1), np.float32)
    rows[:, :taps] = w.reshape(c, taps)[channels]
    rows[:, taps] = bias.reshape(-1)[channels] if bias.size else 0.0
    return np.ascontiguousarray(rows.reshape(blocks, 8, taps + 1).transpose(0, 2, 1))


NO_BLOCKS = np.empty((0, 0, 8), np.float32)  # dwblock.depthwise_blocked's blocks where none were made
NO_BLOCKS.flags.writeable = False
# The depthwise kernels' ``means`` where the plane means are not wanted (an empty array: the
# kernels write nothing there; never written, but numba's signature takes a writable array).
NO_MEANS = np.empty(0, np.float32)
# The kernels that take ``means`` (each output plane's mean, written while the plane is in
# cache): a global average pool of their output can be part of the layer (glow_like's
# ``fuse_plane_means``, nnpack's plans).
MEAN_ALGORITHMS = ("depthwise3x3_same", "depthwise3x3_s2", "depthwise_blocked", "depthwise_rows")
MEANS_ENV = "LOWERKIT_PLANE_MEANS"  # "0" (read when a program or plan is built): keep the pools apart


def means_fused() -> bool:
    """Whether a depthwise layer of :data:`MEAN_ALGORITHMS` computes the pool of its output
    (``$LOWERKIT_PLANE_MEANS`` is not ``0``)."""
    return os.environ.get(MEANS_ENV, "") != "0"


def plane_means(out: np.ndarray, means: np.ndarray) -> None:
    """``means`` [N, C, 1, 1] (or [N * C]) = the mean of each plane of ``out`` [N, C, H, W], by
    the global average pool's kernel: for a layer whose kernel has no ``means``."""
    from . import load

    load("pool").global_avg_pool2d(out, means.reshape(out.shape[0], out.shape[1], 1, 1), 0,
                                   out.shape[0] * out.shape[1])
