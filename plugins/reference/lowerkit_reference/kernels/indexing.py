"""Slice, split, gather, pad and expand: data movement only."""

from __future__ import annotations

import numpy as np

from lowerkit.opset.indexing import slice_ranges


def slice_(args, attrs):
    x = args[0]
    return np.ascontiguousarray(x[tuple(slice_ranges("slice", x.shape, attrs))])


def split(args, attrs):
    x = args[0]
    bounds = np.cumsum(attrs["sizes"])[:-1]
    return [np.ascontiguousarray(p) for p in np.split(x, bounds, axis=attrs["dim"])]


def gather(args, attrs):
    x = args[0]
    return np.take(x, attrs["indices"], axis=attrs["dim"] % x.ndim)


_NUMPY_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def pad(args, attrs):
    x = args[0]
    pads, rank = attrs["pads"], x.ndim
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    mode = _NUMPY_PAD_MODES[attrs["mode"]]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=x.dtype.type(attrs["value"]))
    return np.pad(x, widths, mode=mode)


def expand(args, attrs):
    return np.ascontiguousarray(np.broadcast_to(args[0], attrs["shape"]))


KERNELS = {"slice": slice_, "split": split, "gather": gather, "pad": pad, "expand": expand}
