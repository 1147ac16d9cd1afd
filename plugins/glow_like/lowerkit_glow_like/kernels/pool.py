"""Pooling kernels: max and average windows and the global average on the compiled kernels of
``lowerkit.backend.cpu.jit.pool`` (numba, loaded at bind time); int8 max pooling in numpy."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import team_layers
from lowerkit.backend.cpu.jit.select import max_pool3x3_fits

from ._base import kernel
from ._window import taps


def _pool_taps(x, out, attrs):
    ks = tuple(attrs["kernel_size"])
    stride = tuple(attrs.get("stride") or ks)
    padding = tuple(attrs.get("padding", (0, 0, 0, 0)))
    dilation = tuple(attrs.get("dilation", (1, 1)))
    return taps(x.shape[2:], out.shape[2:], ks, stride, padding, dilation), ks, stride, padding


PARALLEL_MIN_ELEMENTS = 100_000  # smaller poolings run serially
# The compiled 3x3 max pool does ResNet's 64x112x112 (batch 1) in 0.25 ms on one thread and
# 0.28 ms split over two (the hand-off costs ~0.1 ms): split only outputs 4x that size.
PARALLEL_MIN_OUTPUTS_3X3 = 800_000


def _window(attrs):
    ks = tuple(attrs["kernel_size"])
    stride = tuple(attrs.get("stride") or ks)
    pt, pl, _, _ = tuple(attrs.get("padding", (0, 0, 0, 0)))
    dh, dw = tuple(attrs.get("dilation", (1, 1)))
    return ks, stride, (pt, pl), (dh, dw)


def _prepare_window(x, out, attrs, inv, is_max: bool, parallel, team=None):
    """Bind the compiled window pool (``lowerkit.backend.cpu.jit.pool``), split by planes
    (the 3x3 max pool on a ``team``: one region, bands of planes)."""
    from lowerkit.backend.cpu import jit

    kernels = jit.load("pool")
    (kh, kw), (sh, sw), (pt, pl), (dh, dw) = _window(attrs)
    planes = x.shape[0] * x.shape[1]
    three = is_max and max_pool3x3_fits((kh, kw), (sh, sw), (pt, pl), (dh, dw), x.shape[2:], out.shape[2:])
    if three and team is not None and out.size >= team_layers.MIN_POOL_OUTPUTS:
        team_kernels = team.kernels()

        def run() -> None:
            if team.usable():
                team_kernels.max_pool3x3(x, out, sh, pt, pl, team.ways)
            else:
                kernels.max_pool3x3(x, out, sh, pt, pl, 0, planes)

        return run
    big = out.size >= PARALLEL_MIN_OUTPUTS_3X3 if three else x.size >= PARALLEL_MIN_ELEMENTS
    ways = parallel.ways if parallel is not None and big else 1
    cut = [planes * j // ways for j in range(ways + 1)]

    if three:
        def band(j: int) -> None:
            kernels.max_pool3x3(x, out, sh, pt, pl, cut[j], cut[j + 1])
    else:
        def band(j: int) -> None:
            kernels.pool2d(x, inv, out, is_max, kh, kw, sh, sw, pt, pl, dh, dw, cut[j], cut[j + 1])

    return (lambda: band(0)) if ways == 1 else (lambda: parallel(band))


def prepare_max_pool(inputs, outputs, attrs, scratch, parallel=None, team=None):
    """Max pooling, compiled: 3x3 windows of stride 1 or 2 as one expression of nine taps per
    output (``max_pool3x3``), others row by row, each output row folding its window's input
    rows in place."""
    (x,), (out,) = inputs, outputs
    if out.dtype != np.float32:
        return _prepare_max_pool_numpy(x, out, attrs)
    return _prepare_window(x, out, attrs, np.empty((0, 0), np.float32), True, parallel, team)


def _prepare_max_pool_numpy(x, out, attrs):
    """Any dtype (int8 programs): a running maximum over the window taps."""
    tap_list = _pool_taps(x, out, attrs)[0]
    lowest = np.iinfo(out.dtype).min if out.dtype.kind in "iu" else -np.inf

    def run():
        out.fill(lowest)
        for t in tap_list:
            if t.oh1 > t.oh0 and t.ow1 > t.ow0:
                dst = out[:, :, t.oh0 : t.oh1, t.ow0 : t.ow1]
                np.maximum(dst, x[:, :, t.rows, t.cols], out=dst)

    return run


def avg_pool_divisor(in_hw, out_hw, attrs) -> np.ndarray:
    """Per-output-position divisor, torch's rule: count_include_pad counts padding inside bounds."""
    (h, w), (oh, ow) = in_hw, out_hw
    kh, kw = attrs["kernel_size"]
    sh, sw = tuple(attrs.get("stride") or (kh, kw))
    pt, pl, pb, pr = attrs.get("padding", (0, 0, 0, 0))
    include = attrs.get("count_include_pad", True)

    def counts(size, out_size, k, s, p0, p1):
        start = np.arange(out_size) * s - p0
        end = np.minimum(start + k, size + p1)
        padded = end - start
        clipped = np.minimum(end, size) - np.maximum(start, 0)
        return padded if include else clipped

    return np.outer(counts(h, oh, kh, sh, pt, pb), counts(w, ow, kw, sw, pl, pr)).astype(np.float64)


def prepare_avg_pool(inputs, outputs, attrs, scratch, parallel=None):
    """Average pooling, compiled: window sums row by row, times 1 / divisor (torch's rule)."""
    (x,), (out,) = inputs, outputs
    inv = (1.0 / avg_pool_divisor(x.shape[2:], out.shape[2:], attrs)).astype(np.float32)
    return _prepare_window(x, out, attrs, inv, False, parallel)


def prepare_global_avg_pool(inputs, outputs, attrs, scratch, parallel=None):
    """Global average, compiled: one sum per plane."""
    from lowerkit.backend.cpu import jit

    kernels = jit.load("pool")
    (x,), (out,) = inputs, outputs
    planes = x.shape[0] * x.shape[1]
    return lambda: kernels.global_avg_pool2d(x, out, 0, planes)


kernel("max_pool2d", parallel=True, team=True)(prepare_max_pool)
kernel("avg_pool2d", parallel=True)(prepare_avg_pool)
kernel("global_avg_pool2d")(prepare_global_avg_pool)
