"""Convolution gradients (rare in inference graphs): GEMMs over allocated columns.

``conv2d_weight_grad``: dW[g] = sum_n dY[n, g] @ im2col(x[n, g])^T.
``conv2d_input_grad``:  dX[n, g] = col2im(W[g]^T @ dY[n, g]).
"""

from __future__ import annotations

import numpy as np

from numpy.lib.stride_tricks import sliding_window_view

from ._base import conv_geometry, kernel
from ._window import Tap, taps


def fill_columns(col: np.ndarray, image: np.ndarray, tap_list: list[Tap], out_hw) -> None:
    """im2col for one image (channels of one group): col[c, kh, kw, oh, ow] = x[c, ih, iw]."""
    oh, ow = out_hw
    for t in tap_list:
        dst = col[:, t.kh, t.kw]
        if t.oh1 <= t.oh0 or t.ow1 <= t.ow0:
            dst[...] = 0
            continue
        if t.oh0 > 0:
            dst[:, : t.oh0] = 0
        if t.oh1 < oh:
            dst[:, t.oh1 :] = 0
        if t.ow0 > 0:
            dst[:, t.oh0 : t.oh1, : t.ow0] = 0
        if t.ow1 < ow:
            dst[:, t.oh0 : t.oh1, t.ow1 :] = 0
        dst[:, t.oh0 : t.oh1, t.ow0 : t.ow1] = image[:, t.rows, t.cols]


WEIGHT_GRAD_COLUMNS = 1 << 23  # im2col elements per chunk of images (32 MB of float32)


@kernel("conv2d_weight_grad")
def _weight_grad(inputs, outputs, attrs, scratch):
    (x, dy), (out,) = inputs, outputs
    stride, padding, dilation, groups = conv_geometry(attrs)
    n, c, h, w = x.shape
    oc, cg, kh, kw = out.shape
    _, _, oh, ow = dy.shape
    ocg = oc // groups
    tap_list = taps((h, w), (oh, ow), (kh, kw), stride, padding, dilation)

    if groups > 1:  # grouped and depthwise: one contraction over every group at once
        return _grouped_weight_grad(x, dy, out, stride, padding, dilation, groups)
    k, p = cg * kh * kw, oh * ow
    # Images share one GEMM per chunk: accumulating a full weight-sized product per image
    # costs more than the GEMM itself when the output is small (deep layers, P ~ 1).
    chunk = max(1, min(n, WEIGHT_GRAD_COLUMNS // max(1, k * p)))

    def run():
        for g in range(groups):
            acc = None
            for i0 in range(0, n, chunk):
                images = range(i0, min(n, i0 + chunk))
                cols = np.empty((len(images), cg, kh, kw, oh, ow), dtype=x.dtype)
                for j, i in enumerate(images):
                    fill_columns(cols[j], x[i, g * cg : (g + 1) * cg], tap_list, (oh, ow))
                dyg = dy[i0 : i0 + len(images), g * ocg : (g + 1) * ocg].reshape(len(images), ocg, p)
                part = np.tensordot(dyg, cols.reshape(len(images), k, p), axes=([0, 2], [0, 2]))  # [OCg, K]
                acc = part if acc is None else acc + part
            np.copyto(out[g * ocg : (g + 1) * ocg], acc.reshape(ocg, cg, kh, kw), casting="unsafe")

    return run


@kernel("conv2d_input_grad")
def _input_grad(inputs, outputs, attrs, scratch):
    (wt, dy), (out,) = inputs, outputs
    stride, padding, dilation, groups = conv_geometry(attrs)
    n, c, h, w = out.shape
    oc, cg, kh, kw = wt.shape
    _, _, oh, ow = dy.shape
    ocg = oc // groups
    tap_list = taps((h, w), (oh, ow), (kh, kw), stride, padding, dilation)
    if groups > 1:  # grouped and depthwise: one contraction over every group at once
        return _grouped_input_grad(wt, dy, out, stride, padding, dilation, groups)
    w2 = wt.reshape(groups, ocg, cg * kh * kw)

    def run():
        out.fill(0)
        for i in range(n):
            for g in range(groups):
                dyg = dy[i, g * ocg : (g + 1) * ocg].reshape(ocg, oh * ow)
                col = (w2[g].T @ dyg).reshape(cg, kh, kw, oh, ow)
                dst = out[i, g * cg : (g + 1) * cg]
                for t in tap_list:
                    if t.oh1 > t.oh0 and t.ow1 > t.ow0:
                        dst[:, t.rows, t.cols] += col[:, t.kh, t.kw, t.oh0 : t.oh1, t.ow0 : t.ow1]

    return run


# Grouped convolutions (depthwise above all) have many groups of few channels: a GEMM per
# image and group is all call overhead, so these contract over every group in one einsum.
def _windows(x: np.ndarray, out_hw, kernel_hw, stride, padding, dilation) -> np.ndarray:
    """View [N, C, OH, OW, KH, KW] of the zero-padded input under each output position."""
    top, left, bottom, right = padding
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + top + bottom, w + left + right), dtype=x.dtype)
    xp[:, :, top : top + h, left : left + w] = x
    (kh, kw), (dh, dw), (sh, sw) = kernel_hw, dilation, stride
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, : out_hw[0], : out_hw[1]]


def _grouped_weight_grad(x, dy, out, stride, padding, dilation, groups):
    n, c = x.shape[:2]
    oc, cg, kh, kw = out.shape
    oh, ow = dy.shape[2:]

    def run():
        win = _windows(x, (oh, ow), (kh, kw), stride, padding, dilation).reshape(n, groups, cg, oh, ow, kh, kw)
        dyg = dy.reshape(n, groups, oc // groups, oh, ow)
        grad = np.einsum("ngoyx,ngcyxij->gocij", dyg, win, optimize=True)
        np.copyto(out, grad.reshape(out.shape), casting="unsafe")

    return run


def _grouped_input_grad(wt, dy, out, stride, padding, dilation, groups):
    n, c, h, w = out.shape
    oc, cg, kh, kw = wt.shape
    oh, ow = dy.shape[2:]
    top, left, bottom, right = padding
    (sh, sw), (dh, dw) = stride, dilation
    w5 = wt.reshape(groups, oc // groups, cg, kh, kw)

    def run():
        dyg = dy.reshape(n, groups, oc // groups, oh, ow)
        cols = np.einsum("ngoyx,gocij->ngcyxij", dyg, w5, optimize=True).reshape(n, c, oh, ow, kh, kw)
        grad = np.zeros((n, c, h + top + bottom, w + left + right), dtype=out.dtype)
        for i in range(kh):  # every tap adds its contribution at its strided input positions
            for j in range(kw):
                grad[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw] += (
                    cols[:, :, :, :, i, j]
                )
        np.copyto(out, grad[:, :, top : top + h, left : left + w])

    return run
