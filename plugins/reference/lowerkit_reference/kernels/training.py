"""Training kernels: batch norm with batch statistics, normalisation gradients (in float64),
one-hot labels and seeded dropout."""

from __future__ import annotations

import numpy as np


def _stats_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def batch_norm_train(args, attrs):
    x, weight, bias = args
    xd, axes = x.astype(np.float64), _stats_axes(x)
    mean = xd.mean(axis=axes)
    var = ((xd - _per_channel(mean, x.ndim)) ** 2).mean(axis=axes)
    inv = 1 / np.sqrt(var + attrs["eps"])
    y = (xd - _per_channel(mean, x.ndim)) * _per_channel(inv * weight, x.ndim) + _per_channel(bias, x.ndim)
    return [y.astype(x.dtype), mean.astype(x.dtype), var.astype(x.dtype)]


def _affine_norm_grad(xhat, inv, axes, gw):
    """dx of a normalisation over ``axes`` given x-hat, 1/std and grad times weight."""
    m = np.prod([xhat.shape[a] for a in axes])
    return inv * (gw - gw.sum(axis=axes, keepdims=True) / m - xhat * (gw * xhat).sum(axis=axes, keepdims=True) / m)


def batch_norm_train_grad(args, attrs):
    x, weight, mean, var, g = (a.astype(np.float64) for a in args)
    axes = _stats_axes(x)
    inv = _per_channel(1 / np.sqrt(var + attrs["eps"]), x.ndim)
    xhat = (x - _per_channel(mean, x.ndim)) * inv
    dx = _affine_norm_grad(xhat, inv, axes, g * _per_channel(weight, x.ndim))
    dt = args[0].dtype
    return [dx.astype(dt), (g * xhat).sum(axis=axes).astype(dt), g.sum(axis=axes).astype(dt)]


def _normalized(xd, axes, eps):
    mean = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    return (xd - mean) * inv, inv


def layer_norm_grad(args, attrs):
    x, g = args[0].astype(np.float64), args[1].astype(np.float64)
    axis = attrs["axis"] % x.ndim
    axes = tuple(range(axis, x.ndim))
    xhat, inv = _normalized(x, axes, attrs["eps"])
    gw = g * args[2] if len(args) > 2 else g
    dx = _affine_norm_grad(xhat, inv, axes, gw)
    lead = tuple(range(axis))
    dt = args[0].dtype
    return [dx.astype(dt), (g * xhat).sum(axis=lead).astype(dt), g.sum(axis=lead).astype(dt)]


def group_norm_grad(args, attrs):
    x, g = args[0].astype(np.float64), args[1].astype(np.float64)
    n, c = x.shape[:2]
    groups = attrs["num_groups"]
    xhat, inv = _normalized(x.reshape(n, groups, -1), (2,), attrs["eps"])
    gw = g * _per_channel(args[2], x.ndim) if len(args) > 2 else g
    dx = _affine_norm_grad(xhat, inv, (2,), gw.reshape(n, groups, -1)).reshape(x.shape)
    xhat = xhat.reshape(x.shape)
    axes = _stats_axes(x)
    dt = args[0].dtype
    return [dx.astype(dt), (g * xhat).sum(axis=axes).astype(dt), g.sum(axis=axes).astype(dt)]


def one_hot(args, attrs):
    labels = args[0]
    classes = np.arange(attrs["num_classes"])
    return (labels[..., None] == classes).astype(np.dtype(_NUMPY[attrs["dtype"]]))


_NUMPY = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def dropout_mask(shape, seed: int, salt: int, p: float) -> np.ndarray:
    """The keep mask of a dropout node: PCG64 seeded with [seed, salt] (seed taken mod 2**64)."""
    rng = np.random.default_rng([int(seed) % 2**64, int(salt) % 2**64])
    return rng.random(shape) >= p


def dropout(args, attrs):
    x, seed = args
    p = attrs["p"]
    keep = dropout_mask(x.shape, int(seed), attrs["salt"], p)
    return np.where(keep, x / x.dtype.type(1 - p), x.dtype.type(0))


KERNELS = {
    "batch_norm_train": batch_norm_train, "batch_norm_train_grad": batch_norm_train_grad,
    "layer_norm_grad": layer_norm_grad, "group_norm_grad": group_norm_grad,
    "one_hot": one_hot, "dropout": dropout,
}
