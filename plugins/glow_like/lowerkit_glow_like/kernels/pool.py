"""Pooling kernels: max and average as a running reduction over kernel taps into ``out``."""

from __future__ import annotations

import numpy as np

from ._base import kernel
from ._window import taps


def _pool_taps(x, out, attrs):
    ks = tuple(attrs["kernel_size"])
    stride = tuple(attrs.get("stride") or ks)
    padding = tuple(attrs.get("padding", (0, 0, 0, 0)))
    dilation = tuple(attrs.get("dilation", (1, 1)))
    return taps(x.shape[2:], out.shape[2:], ks, stride, padding, dilation), ks, stride, padding


def prepare_max_pool(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    tap_list = _pool_taps(x, out, attrs)[0]
    lowest = -np.inf if out.dtype.kind == "f" else np.iinfo(out.dtype).min

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


kernel("max_pool2d")(prepare_max_pool)
kernel("avg_pool2d")(prepare_avg_pool)
kernel("global_avg_pool2d")(prepare_global_avg_pool)
