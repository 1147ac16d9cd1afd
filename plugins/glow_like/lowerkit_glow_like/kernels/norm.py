"""Normalisation kernels: inference batch norm (unfolded form) and (log-)softmax (compiled over
the last axis, ``lowerkit.backend.cpu.jit.norm``)."""

from __future__ import annotations

import numpy as np

from ._base import kernel


@kernel("batch_norm", inplace=True)
def _batch_norm(inputs, outputs, attrs, scratch):
    x, mean, var, weight, bias = inputs
    (out,) = outputs
    eps = attrs.get("eps", 1e-5)
    # Per-channel vectors broadcast over dim 1 of x, whatever its rank.
    tail = (1,) * (x.ndim - 2)
    shape = (-1,) + tail

    def run():
        scale = (weight / np.sqrt(var + eps)).reshape(shape)
        np.subtract(x, mean.reshape(shape), out=out)
        np.multiply(out, scale, out=out)
        np.add(out, bias.reshape(shape), out=out)

    return run


def _prepare_softmax(inputs, outputs, attrs, log: bool):
    """Over the last axis: the compiled one-row-at-a-time kernel; other axes in numpy."""
    (x,), (out,) = inputs, outputs
    dim = attrs.get("dim", -1)
    if dim in (-1, x.ndim - 1) and x.dtype == np.float32 and x.size:
        from lowerkit.backend.cpu import jit

        kernels = jit.load("norm")
        rows = x.size // x.shape[-1]
        x2, out2 = x.reshape(rows, x.shape[-1]), out.reshape(rows, x.shape[-1])
        return lambda: kernels.softmax_rows(x2, out2, log, 0, rows)
    if log:
        def run():
            np.subtract(x, x.max(axis=dim, keepdims=True), out=out)
            lse = np.log(np.exp(out).sum(axis=dim, keepdims=True))
            np.subtract(out, lse, out=out)
    else:
        def run():
            np.subtract(x, x.max(axis=dim, keepdims=True), out=out)
            np.exp(out, out=out)
            np.divide(out, out.sum(axis=dim, keepdims=True), out=out)
    return run


@kernel("softmax", inplace=True)
def _softmax(inputs, outputs, attrs, scratch):
    return _prepare_softmax(inputs, outputs, attrs, log=False)


@kernel("log_softmax", inplace=True)
def _log_softmax(inputs, outputs, attrs, scratch):
    return _prepare_softmax(inputs, outputs, attrs, log=True)
