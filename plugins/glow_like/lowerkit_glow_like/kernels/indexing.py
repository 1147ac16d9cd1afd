"""Slice, split, gather, pad and expand: copies into planned buffers."""

from __future__ import annotations

import numpy as np

from lowerkit.opset.indexing import slice_ranges

from ._base import kernel


@kernel("slice")
def _slice(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    src = x[tuple(slice_ranges("slice", x.shape, attrs))]
    return lambda: np.copyto(out, src)


@kernel("split")
def _split(inputs, outputs, attrs, scratch):
    (x,) = inputs
    dim = attrs.get("dim", 0) % x.ndim
    bounds = np.cumsum([0] + [int(s) for s in attrs["sizes"]])
    parts = [(out, x[(slice(None),) * dim + (slice(int(b0), int(b1)),)])
             for out, b0, b1 in zip(outputs, bounds[:-1], bounds[1:])]

    def run():
        for out, src in parts:
            np.copyto(out, src)

    return run


@kernel("gather")
def _gather(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    indices = np.asarray(attrs["indices"], dtype=np.int64)
    dim = attrs.get("dim", 0) % x.ndim
    return lambda: np.take(x, indices, axis=dim, out=out, mode="wrap")  # wrap: negative indices


@kernel("pad")
def _pad(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    pads, rank = tuple(attrs["pads"]), x.ndim
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    mode = attrs.get("mode", "constant")
    inner = out[tuple(slice(b, b + s) for (b, _), s in zip(widths, x.shape))]
    if mode == "constant":
        value = attrs.get("value", 0.0)

        def run():
            out.fill(value)
            np.copyto(inner, x)

        return run
    numpy_mode = "reflect" if mode == "reflect" else "edge"
    return lambda: np.copyto(out, np.pad(x, widths, mode=numpy_mode))


@kernel("expand")
def _expand(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    return lambda: np.copyto(out, np.broadcast_to(x, out.shape))
