"""Convolution kernels: im2col through strided window views, one tensordot per group.

Shapes: x [N, C, H, W], weight [OC, C/G, KH, KW], output [N, OC, OH, OW];
padding is [top, left, bottom, right].
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lowerkit.opset import conv_output_size


def _pad(x: np.ndarray, padding) -> np.ndarray:
    top, left, bottom, right = padding
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))


def _windows(xp: np.ndarray, kh: int, kw: int, oh: int, ow: int, stride, dilation) -> np.ndarray:
    """View [N, C, OH, OW, KH, KW]: the (dilated) taps under each output position."""
    sh, sw = stride
    dh, dw = dilation
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]


def conv2d(args, attrs):
    x, weight = args[0], args[1]
    stride, padding, dilation, groups = attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"]
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    oh = conv_output_size(h, kh, stride[0], padding[0], padding[2], dilation[0])
    ow = conv_output_size(w, kw, stride[1], padding[1], padding[3], dilation[1])
    win = _windows(_pad(x, padding), kh, kw, oh, ow, stride, dilation)
    ocg = oc // groups
    out = np.empty((n, oc, oh, ow), dtype=x.dtype)
    for g in range(groups):
        # contract channel and both kernel axes: [N, OH, OW, OCg]
        part = np.tensordot(win[:, g * cg : (g + 1) * cg], weight[g * ocg : (g + 1) * ocg], axes=([1, 4, 5], [1, 2, 3]))
        out[:, g * ocg : (g + 1) * ocg] = part.transpose(0, 3, 1, 2)
    if len(args) > 2:
        out += args[2].reshape(1, oc, 1, 1)
    return out


def conv2d_input_grad(args, attrs):
    weight, grad_output = args
    stride, padding, dilation, groups = attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"]
    n, c, h, w = attrs["input_size"]
    oc, cg, kh, kw = weight.shape
    _, _, oh, ow = grad_output.shape
    ocg = oc // groups
    top, left, bottom, right = padding
    # grad wrt the padded input: every output position scatters grad_output * weight back
    # onto the taps it read.
    grad = np.zeros((n, c, h + top + bottom, w + left + right), dtype=weight.dtype)
    for g in range(groups):
        # [N, OH, OW, Cg, KH, KW]: contribution of each output position to each tap
        cols = np.tensordot(
            grad_output[:, g * ocg : (g + 1) * ocg], weight[g * ocg : (g + 1) * ocg], axes=([1], [0])
        )
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dilation[0], j * dilation[1]
                rows = slice(r0, r0 + (oh - 1) * stride[0] + 1, stride[0])
                colz = slice(c0, c0 + (ow - 1) * stride[1] + 1, stride[1])
                grad[:, g * cg : (g + 1) * cg, rows, colz] += cols[..., i, j].transpose(0, 3, 1, 2)
    return np.ascontiguousarray(grad[:, :, top : top + h, left : left + w])


def conv2d_weight_grad(args, attrs):
    x, grad_output = args
    stride, padding, dilation, groups = attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"]
    oc, cg, kh, kw = attrs["weight_size"]
    _, _, oh, ow = grad_output.shape
    win = _windows(_pad(x, padding), kh, kw, oh, ow, stride, dilation)
    ocg = oc // groups
    grad = np.empty((oc, cg, kh, kw), dtype=x.dtype)
    for g in range(groups):
        # sum over batch and output positions: [OCg, Cg, KH, KW]
        grad[g * ocg : (g + 1) * ocg] = np.tensordot(
            grad_output[:, g * ocg : (g + 1) * ocg], win[:, g * cg : (g + 1) * cg], axes=([0, 2, 3], [0, 2, 3])
        )
    return grad


KERNELS = {
    "conv2d": conv2d,
    "conv2d_input_grad": conv2d_input_grad,
    "conv2d_weight_grad": conv2d_weight_grad,
}
