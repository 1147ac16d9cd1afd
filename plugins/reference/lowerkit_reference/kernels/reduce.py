"""Reductions over a tuple of dims (empty: all)."""

from __future__ import annotations

import numpy as np


def _axes(x: np.ndarray, attrs) -> tuple[int, ...]:
    dims = attrs["dims"]
    return tuple(range(x.ndim)) if not dims else tuple(d % x.ndim for d in dims)


def _reduction(fn):
    def kernel(args, attrs):
        x = args[0]
        return np.asarray(fn(x, axis=_axes(x, attrs), keepdims=attrs["keepdim"])).astype(x.dtype, copy=False)

    return kernel


KERNELS = {
    "reduce_mean": _reduction(np.mean),
    "reduce_sum": _reduction(np.sum),
    "reduce_max": _reduction(np.max),
    "reduce_min": _reduction(np.min),
}
