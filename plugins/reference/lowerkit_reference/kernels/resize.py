"""``interpolate``: one spatial dim at a time (nearest picks, linear blends two neighbours).

Coordinates are computed as PyTorch does, in the input's precision with the inverse scale
multiplied (so nearest indices agree with torch at exact integer positions).
"""

from __future__ import annotations

import numpy as np


def source_coordinates(out_size: int, in_size: int, scale: float, mode: str, dtype) -> np.ndarray:
    """The input coordinate of each output position along one dim."""
    o = np.arange(out_size, dtype=dtype)
    if mode == "align_corners":
        if out_size == 1:
            return np.zeros(1, dtype)
        return o * dtype.type((in_size - 1) / (out_size - 1))
    inv = dtype.type(1.0 / scale)
    if mode == "asymmetric":
        return o * inv
    if mode == "pytorch_half_pixel" and out_size == 1:
        return np.zeros(1, dtype)
    return (o + dtype.type(0.5)) * inv - dtype.type(0.5)


def nearest_indices(coords: np.ndarray, in_size: int, rounding: str) -> np.ndarray:
    if rounding == "floor":
        idx = np.floor(coords)
    elif rounding == "ceil":
        idx = np.ceil(coords)
    elif rounding == "round_prefer_floor":
        idx = np.ceil(coords - 0.5)
    else:  # round_prefer_ceil
        idx = np.floor(coords + 0.5)
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


def interpolate(args, attrs):
    x = args[0]
    compute = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    y = x.astype(compute)
    for axis, (size, scale) in enumerate(zip(attrs["size"], attrs["scales"]), start=2):
        in_size = y.shape[axis]
        coords = source_coordinates(size, in_size, scale, attrs["coordinate_transformation_mode"], compute)
        if attrs["mode"] == "nearest":
            y = np.take(y, nearest_indices(coords, in_size, attrs["nearest_mode"]), axis=axis)
            continue
        coords = np.maximum(coords, compute.type(0))  # torch clamps negative source positions
        low = np.minimum(np.floor(coords).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        frac = (coords - low).astype(compute).reshape((-1,) + (1,) * (y.ndim - axis - 1))
        y = np.take(y, low, axis=axis) * (1 - frac) + np.take(y, high, axis=axis) * frac
    return y.astype(x.dtype)


KERNELS = {"interpolate": interpolate}
