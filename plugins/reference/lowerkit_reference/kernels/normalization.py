"""Layer and group normalisation: statistics in float64, result in the input's dtype."""

from __future__ import annotations

import numpy as np


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True)
    return (xd - mean) / np.sqrt(var + eps)


def layer_norm(args, attrs):
    x = args[0]
    axis = attrs["axis"] % x.ndim
    y = _normalize(x, tuple(range(axis, x.ndim)), attrs["eps"])
    if len(args) > 1:
        y = y * args[1]
    if len(args) > 2:
        y = y + args[2]
    return y.astype(x.dtype)


def group_norm(args, attrs):
    x = args[0]
    n, c = x.shape[:2]
    groups = attrs["num_groups"]
    # [N, G, C/G * spatial]: each group's channels and positions share one mean and variance.
    grouped = x.reshape(n, groups, -1)
    y = _normalize(grouped, (2,), attrs["eps"]).reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    if len(args) > 1:
        y = y * args[1].reshape(per_channel)
    if len(args) > 2:
        y = y + args[2].reshape(per_channel)
    return y.astype(x.dtype)


KERNELS = {"layer_norm": layer_norm, "group_norm": group_norm}
