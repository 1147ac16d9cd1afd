"""Shape kernels: pure data movement."""

from __future__ import annotations

import numpy as np


def flatten(args, attrs):
    x = np.atleast_1d(args[0])  # torch flattens a scalar to [1]
    start = attrs["start_dim"] % x.ndim
    end = attrs["end_dim"] % x.ndim
    merged = int(np.prod(x.shape[start : end + 1]))
    return x.reshape(x.shape[:start] + (merged,) + x.shape[end + 1 :])


def reshape(args, attrs):
    return np.reshape(args[0], attrs["shape"])


def transpose(args, attrs):
    return np.transpose(args[0], attrs["perm"])


def concat(args, attrs):
    return np.concatenate(args, axis=attrs["dim"])


KERNELS = {"flatten": flatten, "reshape": reshape, "transpose": transpose, "concat": concat}
