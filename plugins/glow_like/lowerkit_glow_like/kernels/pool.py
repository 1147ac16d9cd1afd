"""Pooling kernels: max and average as a running reduction over kernel taps into ``out``."""

from __future__ import annotations

import numpy as np

from ._base import kernel, scratch_array
from ._window import taps


def _pool_taps(x, out, attrs):
    ks = tuple(attrs["kernel_size"])
    stride = tuple(attrs.get("stride") or ks)
    padding = tuple(attrs.get("padding", (0, 0, 0, 0)))
    dilation = tuple(attrs.get("dilation", (1, 1)))
    return taps(x.shape[2:], out.shape[2:], ks, stride, padding, dilation), ks, stride, padding


PARALLEL_MIN_ELEMENTS = 100_000  # smaller poolings run serially


def _max_pool_geometry(x_shape, out_shape, attrs):
    ks = tuple(attrs["kernel_size"])
    stride = tuple(attrs.get("stride") or ks)
    pt, pl, _, _ = tuple(attrs.get("padding", (0, 0, 0, 0)))
    dh, dw = tuple(attrs.get("dilation", (1, 1)))
    n, c, h, w = x_shape
    oh, ow = out_shape[2:]
    # The padded buffer holds every row/column any window reads (ceil_mode may read past
    # the end padding; those positions hold the lowest value, like padding).
    hp = max(pt + h, (oh - 1) * stride[0] + (ks[0] - 1) * dh + 1)
    wp = max(pl + w, (ow - 1) * stride[1] + (ks[1] - 1) * dw + 1)
    return ks, stride, (pt, pl), (dh, dw), (n, c, hp, wp)


def _max_pool_scratch(in_types, out_types, attrs):
    x, out = in_types[0], out_types[0]
    _, _, _, _, (n, c, hp, wp) = _max_pool_geometry(x.shape, out.shape, attrs)
    return (n * c * hp * wp + n * c * out.shape[2] * wp) * x.numpy_dtype.itemsize


def prepare_max_pool(inputs, outputs, attrs, scratch, parallel=None):
    """Separable max: over the window's rows into ``rows[N, C, OH, Wp]``, then its columns.
    With ``parallel``, each task pools its own band of channels."""
    (x,), (out,) = inputs, outputs
    (kh, kw), (sh, sw), (pt, pl), (dh, dw), (n, c, hp, wp) = _max_pool_geometry(x.shape, out.shape, attrs)
    h, w = x.shape[2:]
    oh, ow = out.shape[2:]
    lowest = -np.inf if out.dtype.kind == "f" else np.iinfo(out.dtype).min
    pad = scratch_array(scratch, x.dtype, (n, c, hp, wp))
    rows = scratch_array(scratch, x.dtype, (n, c, oh, wp), offset=pad.nbytes)

    def band(c0: int, c1: int):
        p, r, o = pad[:, c0:c1], rows[:, c0:c1], out[:, c0:c1]
        interior = p[:, :, pt : pt + h, pl : pl + w]
        src = x[:, c0:c1]
        borders = [b for b in (p[:, :, :pt], p[:, :, pt + h :], p[:, :, :, :pl], p[:, :, :, pl + w :]) if b.size]
        row_taps = [p[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh] for i in range(kh)]
        col_taps = [r[:, :, :, j * dw : j * dw + (ow - 1) * sw + 1 : sw] for j in range(kw)]

        def run_band():
            for border in borders:
                border.fill(lowest)
            np.copyto(interior, src)
            np.copyto(r, row_taps[0])
            for tap in row_taps[1:]:
                np.maximum(r, tap, out=r)
            np.copyto(o, col_taps[0])
            for tap in col_taps[1:]:
                np.maximum(o, tap, out=o)

        return run_band

    if parallel is None or x.size < PARALLEL_MIN_ELEMENTS:
        return band(0, c)
    runs = [band(c * j // parallel.ways, c * (j + 1) // parallel.ways) for j in range(parallel.ways)]
    return lambda: parallel(lambda j: runs[j]())


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


def prepare_avg_pool(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    tap_list = _pool_taps(x, out, attrs)[0]
    inv = (1.0 / avg_pool_divisor(x.shape[2:], out.shape[2:], attrs)).astype(out.dtype)

    def run():
        out.fill(0)
        for t in tap_list:
            if t.oh1 > t.oh0 and t.ow1 > t.ow0:
                dst = out[:, :, t.oh0 : t.oh1, t.ow0 : t.ow1]
                np.add(dst, x[:, :, t.rows, t.cols], out=dst)
        np.multiply(out, inv, out=out)

    return run


def prepare_global_avg_pool(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    return lambda: np.mean(x, axis=(2, 3), keepdims=True, out=out)


kernel("max_pool2d", scratch_bytes=_max_pool_scratch, parallel=True)(prepare_max_pool)
kernel("avg_pool2d")(prepare_avg_pool)
kernel("global_avg_pool2d")(prepare_global_avg_pool)
