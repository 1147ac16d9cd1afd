"""Oracles for the nnpack tests: float64 direct convolution, its gradients, and the error measure."""

from __future__ import annotations

import numpy as np

# Bounds on max|got - want| / max|want| (see docs/nnpack.md, "Tolerances"). NNPACK's own
# tests allow 1e-3 for wt8x8 on multi-tile inputs and 1e-5 for FFT on single tiles; our FFT
# runs in complex64 over up to 512 channels, so it gets 1e-4. wt6x6 / wt4x4 (extensions,
# smaller interpolation points) are measured about 10x more accurate than wt8x8.
TOLERANCE = {"wt8x8": 1e-3, "wt6x6": 1e-4, "wt4x4": 1e-4, "ft8x8": 1e-4, "ft16x16": 1e-4, "implicit_gemm": 1e-5, "direct": 1e-5}


def naive_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0)):
    """Direct convolution in float64 (NCHW, padding top/left/bottom/right)."""
    t, l, bo, r = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    _, _, h, wd = xp.shape
    oc, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((x.shape[0], oc, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + stride[0] * (oh - 1) + 1 : stride[0], j : j + stride[1] * (ow - 1) + 1 : stride[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    if b is not None:
        out += b[None, :, None, None]
    return out


def naive_input_grad(w, dy, in_hw, padding):
    """grad of sum(conv(x) * dy) w.r.t. x, stride 1, in float64."""
    t, l, b, r = padding
    oc, c, kh, kw = w.shape
    n, _, oh, ow = dy.shape
    dxp = np.zeros((n, c, in_hw[0] + t + b, in_hw[1] + l + r))
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i : i + oh, j : j + ow] += np.einsum("nohw,oc->nchw", dy.astype(np.float64), w[:, :, i, j])
    return dxp[:, :, t : t + in_hw[0], l : l + in_hw[1]]


def naive_weight_grad(x, dy, kernel, padding):
    """grad of sum(conv(x) * dy) w.r.t. the weight, stride 1, in float64."""
    t, l, b, r = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (l, r)))
    oh, ow = dy.shape[2], dy.shape[3]
    dw = np.zeros((dy.shape[1], x.shape[1], *kernel))
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            dw[:, :, i, j] = np.einsum("nohw,nchw->oc", dy.astype(np.float64), xp[:, :, i : i + oh, j : j + ow])
    return dw


def rel_error(got, want) -> float:
    """max|got - want| / max|want|."""
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))
