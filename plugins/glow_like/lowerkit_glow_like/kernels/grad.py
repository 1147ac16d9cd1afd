"""Convolution gradients (rare in inference graphs): GEMMs over allocated columns.

``conv2d_weight_grad``: dW[g] = sum_n dY[n, g] @ im2col(x[n, g])^T.
``conv2d_input_grad``:  dX[n, g] = col2im(W[g]^T @ dY[n, g]).
"""

from __future__ import annotations

import numpy as np

from ._base import kernel
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


def _geometry(attrs):
    return (
        tuple(attrs.get("stride", (1, 1))),
        tuple(attrs.get("padding", (0, 0, 0, 0))),
        tuple(attrs.get("dilation", (1, 1))),
        int(attrs.get("groups", 1)),
    )


@kernel("conv2d_weight_grad")
def _weight_grad(inputs, outputs, attrs, scratch):
    (x, dy), (out,) = inputs, outputs
    stride, padding, dilation, groups = _geometry(attrs)
    n, c, h, w = x.shape
    oc, cg, kh, kw = out.shape
    _, _, oh, ow = dy.shape
    ocg = oc // groups
    tap_list = taps((h, w), (oh, ow), (kh, kw), stride, padding, dilation)

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
    stride, padding, dilation, groups = _geometry(attrs)
    n, c, h, w = out.shape
    oc, cg, kh, kw = wt.shape
    _, _, oh, ow = dy.shape
    ocg = oc // groups
    tap_list = taps((h, w), (oh, ow), (kh, kw), stride, padding, dilation)
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
