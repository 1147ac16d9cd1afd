"""Backward kernels of the derivatives table: pointwise activation grads, softmax grads,
pooling grads and the scatters that undo slice, pad and gather."""

from __future__ import annotations

import math

import numpy as np

from lowerkit.opset.indexing import slice_ranges

from .activation import erf_array
from .pool import _geometry, _windows
from .resize import nearest_indices, source_coordinates


def sum_to_shape(args, attrs):
    x, shape = args[0], tuple(attrs["shape"])
    lead = x.ndim - len(shape)
    stretched = tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    out = x.sum(axis=tuple(range(lead)) + stretched, keepdims=True) if lead or stretched else x
    return np.ascontiguousarray(out.reshape(shape), dtype=x.dtype)


def relu_grad(args, attrs):
    x, g = args
    return np.where(x > 0, g, g.dtype.type(0))


def clip_grad(args, attrs):
    x, g = args
    return np.where((x >= attrs["min"]) & (x <= attrs["max"]), g, g.dtype.type(0))


def leaky_relu_grad(args, attrs):
    x, g = args
    return np.where(x > 0, g, g * g.dtype.type(attrs["negative_slope"]))


def hardsigmoid_grad(args, attrs):
    x, g = args
    alpha = x.dtype.type(attrs["alpha"])
    y = x * alpha + x.dtype.type(attrs["beta"])
    return np.where((y > 0) & (y < 1), g * alpha, g.dtype.type(0))


def hardswish_grad(args, attrs):
    x, g = args
    inner = g * (x / x.dtype.type(3) + x.dtype.type(0.5))
    return np.where(x < -3, g.dtype.type(0), np.where(x <= 3, inner, g))


def gelu_grad(args, attrs):
    x, g = args
    xd = x.astype(np.float64)
    if attrs["approximate"] == "tanh":
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (xd + 0.044715 * xd**3))
        d = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * k * (1 + 3 * 0.044715 * xd * xd)
    else:
        d = 0.5 * (1 + erf_array(xd / math.sqrt(2))) + xd * np.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
    return (g * d).astype(g.dtype)


def softmax_grad(args, attrs):
    y, g = args
    return y * (g - np.sum(g * y, axis=attrs["dim"], keepdims=True))


def log_softmax_grad(args, attrs):
    y, g = args
    return g - np.exp(y) * np.sum(g, axis=attrs["dim"], keepdims=True)


def max_pool2d_grad(args, attrs):
    x, g = args
    dilation = attrs["dilation"]
    out, extent, pads = _geometry(x, attrs, dilation)
    xp = np.pad(x, pads, constant_values=-np.inf)
    win = _windows(xp, extent, out, attrs["stride"], dilation)
    kh, kw = win.shape[-2:]
    # first maximum of each window in row-major order, as torch's indices
    k = win.reshape(win.shape[:-2] + (kh * kw,)).argmax(axis=-1)
    n, c, oh, ow = g.shape
    rows = np.arange(oh).reshape(1, 1, oh, 1) * attrs["stride"][0] + (k // kw) * dilation[0]
    cols = np.arange(ow).reshape(1, 1, 1, ow) * attrs["stride"][1] + (k % kw) * dilation[1]
    nn = np.arange(n).reshape(n, 1, 1, 1)
    cc = np.arange(c).reshape(1, c, 1, 1)
    gp = np.zeros(xp.shape, dtype=g.dtype)
    np.add.at(gp, (nn, cc, rows, cols), g)
    top, left = pads[2][0], pads[3][0]
    return np.ascontiguousarray(gp[:, :, top : top + x.shape[2], left : left + x.shape[3]])


def avg_pool2d_grad(args, attrs):
    (g,) = args
    size = tuple(attrs["input_size"])
    x = np.empty(size, dtype=g.dtype)
    out, extent, pads = _geometry(x, attrs, (1, 1))
    top, left, bottom, right = attrs["padding"]
    h, w = size[2:]
    padded = (h + pads[2][0] + pads[2][1], w + pads[3][0] + pads[3][1])
    counted = np.zeros(padded, dtype=g.dtype)
    if attrs["count_include_pad"]:
        counted[: top + h + bottom, : left + w + right] = 1
    else:
        counted[top : top + h, left : left + w] = 1
    sh, sw = attrs["stride"]
    divisors = _windows(counted, extent, out, (sh, sw), (1, 1)).sum(axis=(-2, -1))
    share = g / divisors
    oh, ow = out
    gp = np.zeros(size[:2] + padded, dtype=g.dtype)
    for i in range(extent[0]):  # every tap of every window receives the window's share
        for j in range(extent[1]):
            gp[:, :, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw] += share
    return np.ascontiguousarray(gp[:, :, top : top + h, left : left + w])


def slice_grad(args, attrs):
    (g,) = args
    size = tuple(attrs["input_size"])
    out = np.zeros(size, dtype=g.dtype)
    out[tuple(slice_ranges("slice_grad", size, attrs))] = g
    return out


_NUMPY_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def pad_grad(args, attrs):
    (g,) = args
    size = tuple(attrs["input_size"])
    pads, rank = attrs["pads"], len(size)
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    # pad the flat index of every input element the way pad pads values, then scatter back
    index = np.arange(int(np.prod(size)), dtype=np.int64).reshape(size)
    mode = _NUMPY_PAD_MODES[attrs["mode"]]
    if mode == "constant":
        padded = np.pad(index, widths, mode="constant", constant_values=-1)
    else:
        padded = np.pad(index, widths, mode=mode)
    keep = padded.ravel() >= 0
    out = np.zeros(int(np.prod(size)), dtype=g.dtype)
    np.add.at(out, padded.ravel()[keep], g.ravel()[keep])
    return out.reshape(size)


def gather_grad(args, attrs):
    (g,) = args
    size = tuple(attrs["input_size"])
    dim = attrs["dim"] % len(size)
    indices = np.asarray(attrs["indices"]) % size[dim]
    out = np.zeros(size, dtype=g.dtype)
    moved = np.moveaxis(out, dim, 0)  # a view: [D, pre..., post...]
    k = indices.ndim
    # g is pre + I + post; bring I to the front to match moved[indices]
    order = tuple(range(dim, dim + k)) + tuple(range(dim)) + tuple(range(dim + k, g.ndim))
    np.add.at(moved, indices, np.transpose(g, order))
    return out


def reduce_extreme_grad(args, attrs):
    x, y, g = args
    dims = tuple(d % x.ndim for d in attrs["dims"]) if attrs["dims"] else tuple(range(x.ndim))
    if not attrs["keepdim"]:
        y, g = np.expand_dims(y, dims), np.expand_dims(g, dims)
    hits = x == y
    count = np.maximum(hits.sum(axis=dims, keepdims=True), 1).astype(g.dtype)  # 0 only where no hit
    return np.where(hits, g / count, g.dtype.type(0))


def _resize_matrix(out_size: int, in_size: int, scale: float, attrs, dtype) -> np.ndarray:
    """[out, in]: the linear map interpolate applies along one spatial dim."""
    coords = source_coordinates(out_size, in_size, scale, attrs["coordinate_transformation_mode"], dtype)
    matrix = np.zeros((out_size, in_size), dtype)
    rows = np.arange(out_size)
    if attrs["mode"] == "nearest":
        matrix[rows, nearest_indices(coords, in_size, attrs["nearest_mode"])] = 1
        return matrix
    coords = np.maximum(coords, dtype.type(0))
    low = np.minimum(np.floor(coords).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    frac = (coords - low).astype(dtype)
    np.add.at(matrix, (rows, low), 1 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


def interpolate_grad(args, attrs):
    (g,) = args
    size = tuple(attrs["input_size"])
    compute = np.dtype(np.float32) if g.dtype == np.float16 else g.dtype
    grad = g.astype(compute)
    # interpolate is one linear map per spatial dim; its gradient applies each map transposed
    for axis, (in_size, scale) in enumerate(zip(size[2:], attrs["scales"]), start=2):
        matrix = _resize_matrix(g.shape[axis], in_size, scale, attrs, compute)
        grad = np.moveaxis(np.tensordot(grad, matrix, axes=([axis], [0])), -1, axis)
    return np.ascontiguousarray(grad, dtype=g.dtype)


KERNELS = {
    "sum_to_shape": sum_to_shape, "relu_grad": relu_grad, "clip_grad": clip_grad,
    "leaky_relu_grad": leaky_relu_grad, "hardsigmoid_grad": hardsigmoid_grad,
    "hardswish_grad": hardswish_grad, "gelu_grad": gelu_grad, "softmax_grad": softmax_grad,
    "log_softmax_grad": log_softmax_grad, "max_pool2d_grad": max_pool2d_grad,
    "avg_pool2d_grad": avg_pool2d_grad, "slice_grad": slice_grad, "pad_grad": pad_grad,
    "gather_grad": gather_grad, "reduce_extreme_grad": reduce_extreme_grad,
    "interpolate_grad": interpolate_grad,
}
