"""``interpolate``: index and weight tables built once in ``prepare``; each run is takes and blends.

Coordinates follow PyTorch (inverse scale multiplied, in float32), as the reference does.
"""

from __future__ import annotations

import numpy as np

from ._base import kernel


def _coordinates(out_size: int, in_size: int, scale: float, mode: str) -> np.ndarray:
    f = np.float32
    o = np.arange(out_size, dtype=f)
    if mode == "align_corners":
        return np.zeros(1, f) if out_size == 1 else o * f((in_size - 1) / (out_size - 1))
    inv = f(1.0 / scale)
    if mode == "asymmetric":
        return o * inv
    if mode == "pytorch_half_pixel" and out_size == 1:
        return np.zeros(1, f)
    return (o + f(0.5)) * inv - f(0.5)


def _nearest(coords: np.ndarray, in_size: int, rounding: str) -> np.ndarray:
    rounded = {
        "floor": np.floor(coords), "ceil": np.ceil(coords),
        "round_prefer_floor": np.ceil(coords - 0.5), "round_prefer_ceil": np.floor(coords + 0.5),
    }[rounding]
    return np.clip(rounded, 0, in_size - 1).astype(np.int64)


@kernel("interpolate")
def _interpolate(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    steps = []  # per spatial axis: (axis, low, high, frac or None)
    for axis, (size, scale) in enumerate(zip(attrs["size"], attrs["scales"]), start=2):
        in_size = x.shape[axis]
        coords = _coordinates(size, in_size, scale, attrs.get("coordinate_transformation_mode", "asymmetric"))
        if attrs.get("mode", "nearest") == "nearest":
            steps.append((axis, _nearest(coords, in_size, attrs.get("nearest_mode", "floor")), None, None))
            continue
        coords = np.maximum(coords, np.float32(0))
        low = np.minimum(np.floor(coords).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        frac = (coords - low).astype(x.dtype).reshape((-1,) + (1,) * (x.ndim - axis - 1))
        steps.append((axis, low, high, frac))

    def run():
        y = x
        for axis, low, high, frac in steps:
            if frac is None:
                y = np.take(y, low, axis=axis)
            else:
                a = np.take(y, low, axis=axis)
                y = a + (np.take(y, high, axis=axis) - a) * frac
        np.copyto(out, y)

    return run
