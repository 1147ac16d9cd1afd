"""The remaining backward and training ops of lowerkit.autograd: activation gradients, the
scatters that undo slice, pad and gather, normalisation gradients, one-hot and dropout.
glow_like claims float32 nodes only, so ``one_hot`` and ``dropout`` (integer inputs) run here
only when a whole module is lowered to glow_like."""

from __future__ import annotations

import math

import numpy as np

from lowerkit.opset.indexing import slice_ranges

from ._base import kernel
from .activation import erf_into
from .resize import _coordinates, _nearest
from .training import _channel, _into, _stat_axes


@kernel("hardsigmoid_grad")
def _hardsigmoid_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    alpha, beta = attrs.get("alpha", 1 / 6), attrs.get("beta", 0.5)
    return _into(out, lambda: np.where((x * alpha + beta > 0) & (x * alpha + beta < 1), g * out.dtype.type(alpha), 0))


@kernel("hardswish_grad")
def _hardswish_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    return _into(out, lambda: np.where(x < -3, 0, np.where(x <= 3, g * (x / 3 + 0.5), g)))


@kernel("gelu_grad")
def _gelu_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    tanh = attrs.get("approximate", "none") == "tanh"

    def run():
        xd = x.astype(np.float64)
        if tanh:
            k = math.sqrt(2 / math.pi)
            t = np.tanh(k * (xd + 0.044715 * xd**3))
            d = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * k * (1 + 3 * 0.044715 * xd * xd)
        else:
            cdf = np.empty_like(xd)
            erf_into(xd / math.sqrt(2), cdf)
            d = 0.5 * (1 + cdf) + xd * np.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
        np.copyto(out, g * d, casting="unsafe")

    return run


@kernel("avg_pool2d_grad")
def _avg_pool2d_grad(inputs, outputs, attrs, scratch):
    (g,), (out,) = inputs, outputs
    kh, kw = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    top, left, bottom, right = attrs.get("padding", (0, 0, 0, 0))
    n, c, h, w = out.shape
    oh, ow = g.shape[2:]
    hp = max(top + h + bottom, (oh - 1) * sh + kh)
    wp = max(left + w + right, (ow - 1) * sw + kw)
    counted = np.zeros((hp, wp))
    if attrs.get("count_include_pad", True):
        counted[: top + h + bottom, : left + w + right] = 1
    else:
        counted[top : top + h, left : left + w] = 1
    divisor = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            divisor += counted[i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]

    def run():
        share = g / divisor
        grad = np.zeros((n, c, hp, wp))
        for i in range(kh):
            for j in range(kw):
                grad[:, :, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw] += share
        np.copyto(out, grad[:, :, top : top + h, left : left + w], casting="unsafe")

    return run


@kernel("slice_grad")
def _slice_grad(inputs, outputs, attrs, scratch):
    (g,), (out,) = inputs, outputs
    window = tuple(slice_ranges("slice_grad", out.shape, attrs))

    def run():
        out.fill(0)
        out[window] = g

    return run


@kernel("pad_grad")
def _pad_grad(inputs, outputs, attrs, scratch):
    """Scatter-add through the map from padded positions to the input positions they copy."""
    (g,), (out,) = inputs, outputs
    pads, rank = attrs["pads"], out.ndim
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    index = np.arange(out.size, dtype=np.int64).reshape(out.shape)
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[attrs.get("mode", "constant")]
    padded = np.pad(index, widths, mode="constant", constant_values=-1) if mode == "constant" else np.pad(index, widths, mode=mode)
    keep = padded.ravel() >= 0
    targets = padded.ravel()[keep]

    def run():
        flat = np.zeros(out.size, dtype=out.dtype)
        np.add.at(flat, targets, g.ravel()[keep])
        np.copyto(out, flat.reshape(out.shape))

    return run


@kernel("gather_grad")
def _gather_grad(inputs, outputs, attrs, scratch):
    (g,), (out,) = inputs, outputs
    dim = attrs.get("dim", 0) % out.ndim
    indices = np.asarray(attrs["indices"]) % out.shape[dim]
    k = indices.ndim
    order = tuple(range(dim, dim + k)) + tuple(range(dim)) + tuple(range(dim + k, g.ndim))

    def run():
        out.fill(0)
        np.add.at(np.moveaxis(out, dim, 0), indices, np.transpose(g, order))

    return run


@kernel("reduce_extreme_grad")
def _reduce_extreme_grad(inputs, outputs, attrs, scratch):
    (x, y, g), (out,) = inputs, outputs
    dims = tuple(d % x.ndim for d in attrs.get("dims", ())) or tuple(range(x.ndim))
    keep = attrs.get("keepdim", False)

    def run():
        yk, gk = (y, g) if keep else (np.expand_dims(y, dims), np.expand_dims(g, dims))
        hits = x == yk
        np.copyto(out, np.where(hits, gk / np.maximum(hits.sum(axis=dims, keepdims=True), 1), 0), casting="unsafe")

    return run


def _norm_grad(x, gw, axes, eps):
    """(dx, x-hat) of a normalisation over ``axes``; ``gw`` is grad times the affine weight."""
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * inv
    m = np.prod([x.shape[a] for a in axes])
    dx = inv * (gw - gw.sum(axis=axes, keepdims=True) / m - xhat * (gw * xhat).sum(axis=axes, keepdims=True) / m)
    return dx, xhat


@kernel("layer_norm_grad")
def _layer_norm_grad(inputs, outputs, attrs, scratch):
    x, g = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    dx, dw, db = outputs
    axis = attrs.get("axis", -1) % x.ndim
    axes, lead = tuple(range(axis, x.ndim)), tuple(range(axis))

    def run():
        xd, gd = x.astype(np.float64), g.astype(np.float64)
        d, xhat = _norm_grad(xd, gd * weight if weight is not None else gd, axes, attrs.get("eps", 1e-5))
        np.copyto(dx, d, casting="unsafe")
        np.copyto(dw, (gd * xhat).sum(axis=lead), casting="unsafe")
        np.copyto(db, gd.sum(axis=lead), casting="unsafe")

    return run


@kernel("group_norm_grad")
def _group_norm_grad(inputs, outputs, attrs, scratch):
    x, g = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    dx, dw, db = outputs
    n, groups = x.shape[0], attrs["num_groups"]

    def run():
        xd, gd = x.astype(np.float64), g.astype(np.float64)
        gw = gd * _channel(weight, x.ndim) if weight is not None else gd
        d, xhat = _norm_grad(xd.reshape(n, groups, -1), gw.reshape(n, groups, -1), (2,), attrs.get("eps", 1e-5))
        np.copyto(dx, d.reshape(x.shape), casting="unsafe")
        np.copyto(dw, (gd * xhat.reshape(x.shape)).sum(axis=_stat_axes(x)), casting="unsafe")
        np.copyto(db, gd.sum(axis=_stat_axes(x)), casting="unsafe")

    return run


@kernel("interpolate_grad")
def _interpolate_grad(inputs, outputs, attrs, scratch):
    """The transposed per-dim maps of interpolate, built once as [out, in] matrices."""
    (g,), (out,) = inputs, outputs
    matrices = []
    for axis, (in_size, scale) in enumerate(zip(out.shape[2:], attrs["scales"]), start=2):
        n = g.shape[axis]
        coords = _coordinates(n, in_size, scale, attrs.get("coordinate_transformation_mode", "asymmetric"))
        matrix = np.zeros((n, in_size), np.float32)
        if attrs.get("mode", "nearest") == "nearest":
            matrix[np.arange(n), _nearest(coords, in_size, attrs.get("nearest_mode", "floor"))] = 1
        else:
            coords = np.maximum(coords, np.float32(0))
            low = np.minimum(np.floor(coords).astype(np.int64), in_size - 1)
            frac = coords - low
            np.add.at(matrix, (np.arange(n), low), 1 - frac)
            np.add.at(matrix, (np.arange(n), np.minimum(low + 1, in_size - 1)), frac)
        matrices.append((axis, matrix))

    def run():
        grad = g
        for axis, matrix in matrices:
            grad = np.moveaxis(np.tensordot(grad, matrix, axes=([axis], [0])), -1, axis)
        np.copyto(out, grad, casting="unsafe")

    return run


@kernel("one_hot")
def _one_hot(inputs, outputs, attrs, scratch):
    (labels,), (out,) = inputs, outputs
    classes = np.arange(out.shape[-1])
    return _into(out, lambda: labels[..., None] == classes)


@kernel("dropout")
def _dropout(inputs, outputs, attrs, scratch):
    """The same mask as the reference backend: PCG64 seeded with [seed, salt]."""
    (x, seed), (out,) = inputs, outputs
    p = attrs.get("p", 0.5)

    def run():
        rng = np.random.default_rng([int(seed) % 2**64, int(attrs.get("salt", 0)) % 2**64])
        keep = rng.random(x.shape) >= p
        np.copyto(out, np.where(keep, x / out.dtype.type(1 - p), 0), casting="unsafe")

    return run
