"""Pooling kernels over strided window views. padding is [top, left, bottom, right]."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lowerkit.opset import pool_output_size


def _geometry(x: np.ndarray, attrs, dilation):
    kh, kw = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    top, left, bottom, right = attrs["padding"]
    h, w = x.shape[2:]
    oh = pool_output_size(h, kh, sh, top, bottom, dilation[0], attrs["ceil_mode"])
    ow = pool_output_size(w, kw, sw, left, right, dilation[1], attrs["ceil_mode"])
    eh, ew = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    # ceil_mode windows may run past the end padding: extend so every window is whole.
    extra_h = max(0, (oh - 1) * sh + eh - (h + top + bottom))
    extra_w = max(0, (ow - 1) * sw + ew - (w + left + right))
    pads = ((0, 0), (0, 0), (top, bottom + extra_h), (left, right + extra_w))
    return (oh, ow), (eh, ew), pads


def _windows(xp: np.ndarray, extent, out, stride, dilation) -> np.ndarray:
    """View [..., OH, OW, KH, KW] of the taps under each output position."""
    win = sliding_window_view(xp, extent, axis=(-2, -1))
    return win[..., :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]][..., : out[0], : out[1], :, :]


def max_pool2d(args, attrs):
    x = args[0]
    dilation = attrs["dilation"]
    out, extent, pads = _geometry(x, attrs, dilation)
    xp = np.pad(x, pads, constant_values=-np.inf)
    return _windows(xp, extent, out, attrs["stride"], dilation).max(axis=(-2, -1))


def avg_pool2d(args, attrs):
    x = args[0]
    out, extent, pads = _geometry(x, attrs, (1, 1))
    top, left, bottom, right = attrs["padding"]
    h, w = x.shape[2:]
    xp = np.pad(x, pads)
    # Which padded positions count towards the divisor: the input and, with
    # count_include_pad, the real padding - never the ceil_mode extension.
    counted = np.zeros(xp.shape[2:], dtype=x.dtype)
    if attrs["count_include_pad"]:
        counted[: top + h + bottom, : left + w + right] = 1
    else:
        counted[top : top + h, left : left + w] = 1
    stride = attrs["stride"]
    sums = _windows(xp, extent, out, stride, (1, 1)).sum(axis=(-2, -1))
    divisors = _windows(counted, extent, out, stride, (1, 1)).sum(axis=(-2, -1))
    return sums / divisors


def global_avg_pool2d(args, attrs):
    return np.mean(args[0], axis=(2, 3), keepdims=True)


KERNELS = {"max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d, "global_avg_pool2d": global_avg_pool2d}
