"""``interpolate``: index and weight tables built once in ``prepare``; a 2D resize of float32
planes runs on the compiled kernels (``lowerkit.backend.cpu.jit.resize``), other ranks and
dtypes as numpy's takes and blends.

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


# Planes split between the pool's workers from this many outputs (smaller resizes run on the
# calling thread: the hand-off costs ~0.1 ms).
PARALLEL_MIN_OUTPUTS = 1 << 20


def _tables(x, attrs):
    """Per spatial axis: (axis, low, high, frac) — ``frac`` None for nearest, whose index is
    ``low`` — in PyTorch's coordinates, built once at bind."""
    steps = []
    for axis, (size, scale) in enumerate(zip(attrs["size"], attrs["scales"]), start=2):
        in_size = x.shape[axis]
        coords = _coordinates(size, in_size, scale, attrs.get("coordinate_transformation_mode", "asymmetric"))
        if attrs.get("mode", "nearest") == "nearest":
            steps.append((axis, _nearest(coords, in_size, attrs.get("nearest_mode", "floor")), None, None))
            continue
        coords = np.maximum(coords, np.float32(0))
        low = np.minimum(np.floor(coords).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        frac = (coords - low).astype(x.dtype)
        steps.append((axis, low, high, frac))
    return steps


@kernel("interpolate", parallel=True)
def _interpolate(inputs, outputs, attrs, scratch, parallel=None):
    (x,), (out,) = inputs, outputs
    steps = _tables(x, attrs)
    if x.ndim == 4 and all(a.dtype == np.float32 and a.flags.c_contiguous for a in (x, out)):
        return _compiled(x, out, steps, parallel)

    def run():
        y = x
        for axis, low, high, frac in steps:
            if frac is None:
                y = np.take(y, low, axis=axis)
            else:
                weight = frac.reshape((-1,) + (1,) * (x.ndim - axis - 1))
                a = np.take(y, low, axis=axis)
                y = a + (np.take(y, high, axis=axis) - a) * weight
        np.copyto(out, y)

    return run


def _compiled(x, out, steps, parallel):
    """A 2D resize on the compiled kernels (``lowerkit.backend.cpu.jit.resize``), split by
    planes over the pool's workers where it is large."""
    from lowerkit.backend.cpu import jit

    kernels = jit.load("resize")
    planes = x.shape[0] * x.shape[1]
    ways = parallel.ways if parallel is not None and out.size >= PARALLEL_MIN_OUTPUTS else 1
    cut = [planes * j // ways for j in range(ways + 1)]
    (_, y_low, y_high, y_frac), (_, x_low, x_high, x_frac) = steps
    if y_frac is None:
        def band(j: int) -> None:
            kernels.nearest2d(x, out, y_low, x_low, cut[j], cut[j + 1])
    else:
        rows = np.empty((ways, x.shape[3]), np.float32)  # each band's row buffer

        def band(j: int) -> None:
            kernels.linear2d(x, out, y_low, y_high, y_frac, x_low, x_high, x_frac, rows[j], cut[j], cut[j + 1])

    return (lambda: band(0)) if ways == 1 else (lambda: parallel(band))
