"""Kernels of training graphs (lowerkit.autograd): the backward ops of CNN layers and batch
norm with batch statistics, so a training step's element-wise and pooling work stays on
glow_like. Each computes with numpy and copies into its planned output."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ._base import kernel


def _into(out: np.ndarray, compute):
    return lambda: np.copyto(out, compute(), casting="unsafe")


@kernel("sum_to_shape")
def _sum_to_shape(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    lead = x.ndim - out.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out.shape) if d == 1 and x.shape[lead + i] != 1)
    return _into(out, lambda: x.sum(axis=axes, keepdims=True).reshape(out.shape))


@kernel("relu_grad")
def _relu_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    return _into(out, lambda: np.where(x > 0, g, 0))


@kernel("clip_grad")
def _clip_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)
    return _into(out, lambda: np.where((x >= lo) & (x <= hi), g, 0))


@kernel("leaky_relu_grad")
def _leaky_relu_grad(inputs, outputs, attrs, scratch):
    (x, g), (out,) = inputs, outputs
    slope = out.dtype.type(attrs.get("negative_slope", 0.01))
    return _into(out, lambda: np.where(x > 0, g, g * slope))


@kernel("softmax_grad")
def _softmax_grad(inputs, outputs, attrs, scratch):
    (y, g), (out,) = inputs, outputs
    dim = attrs.get("dim", -1)
    return _into(out, lambda: y * (g - (g * y).sum(axis=dim, keepdims=True)))


@kernel("log_softmax_grad")
def _log_softmax_grad(inputs, outputs, attrs, scratch):
    (y, g), (out,) = inputs, outputs
    dim = attrs.get("dim", -1)
    return _into(out, lambda: g - np.exp(y) * g.sum(axis=dim, keepdims=True))


@kernel("max_pool2d_grad")
def _max_pool2d_grad(inputs, outputs, attrs, scratch):
    """Each window's gradient goes to its first maximum (row-major), as torch's indices."""
    (x, g), (out,) = inputs, outputs
    kh, kw = attrs["kernel_size"]
    sh, sw = attrs["stride"]
    top, left, _, _ = attrs.get("padding", (0, 0, 0, 0))
    dh, dw = attrs.get("dilation", (1, 1))
    n, c, h, w = x.shape
    oh, ow = g.shape[2:]
    hp = max(top + h, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(left + w, (ow - 1) * sw + (kw - 1) * dw + 1)
    nn_ = np.arange(n).reshape(n, 1, 1, 1)
    cc = np.arange(c).reshape(1, c, 1, 1)
    base_r = np.arange(oh).reshape(1, 1, oh, 1) * sh
    base_c = np.arange(ow).reshape(1, 1, 1, ow) * sw

    def run():
        padded = np.full((n, c, hp, wp), -np.inf, dtype=x.dtype)
        padded[:, :, top : top + h, left : left + w] = x
        win = sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
        win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]
        k = win.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1)
        grad = np.zeros((n, c, hp, wp), dtype=out.dtype)
        np.add.at(grad, (nn_, cc, base_r + (k // kw) * dh, base_c + (k % kw) * dw), g)
        np.copyto(out, grad[:, :, top : top + h, left : left + w])

    return run


def _stat_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@kernel("batch_norm_train")
def _batch_norm_train(inputs, outputs, attrs, scratch):
    (x, weight, bias), (y, mean_out, var_out) = inputs, outputs
    eps = attrs.get("eps", 1e-5)

    def run():
        xd = x.astype(np.float64)
        axes = _stat_axes(x)
        mean = xd.mean(axis=axes)
        centered = xd - _channel(mean, x.ndim)
        var = (centered * centered).mean(axis=axes)
        scale = weight / np.sqrt(var + eps)
        np.copyto(y, centered * _channel(scale, x.ndim) + _channel(bias, x.ndim), casting="unsafe")
        np.copyto(mean_out, mean, casting="unsafe")
        np.copyto(var_out, var, casting="unsafe")

    return run


@kernel("batch_norm_train_grad")
def _batch_norm_train_grad(inputs, outputs, attrs, scratch):
    (x, weight, mean, var, g), (dx, dweight, dbias) = inputs, outputs
    eps = attrs.get("eps", 1e-5)

    def run():
        axes = _stat_axes(x)
        count = x.size // x.shape[1]
        inv = 1 / np.sqrt(var.astype(np.float64) + eps)
        xhat = (x - _channel(mean, x.ndim)) * _channel(inv, x.ndim)
        gd = g.astype(np.float64)
        sum_g = gd.sum(axis=axes)
        sum_gx = (gd * xhat).sum(axis=axes)
        scale = _channel(weight * inv / count, x.ndim)
        np.copyto(dx, scale * (count * gd - _channel(sum_g, x.ndim) - xhat * _channel(sum_gx, x.ndim)),
                  casting="unsafe")
        np.copyto(dweight, sum_gx, casting="unsafe")
        np.copyto(dbias, sum_g, casting="unsafe")

    return run
