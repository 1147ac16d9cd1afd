"""Reductions over a tuple of dims (empty: all), written into ``out`` (keepdim or not)."""

from __future__ import annotations

import numpy as np

from ._base import kernel


def _reduction(ufunc_reduce):
    def prepare(inputs, outputs, attrs, scratch):
        (x,), (out,) = inputs, outputs
        dims = tuple(attrs.get("dims", ())) or tuple(range(x.ndim))
        axes = tuple(d % x.ndim for d in dims)
        # Reduce with keepdims into a view of out shaped like it, whatever keepdim says.
        kept = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
        return lambda: ufunc_reduce(x, axis=axes, keepdims=True, out=kept)

    return prepare


kernel("reduce_mean")(_reduction(np.mean))
kernel("reduce_sum")(_reduction(np.sum))
kernel("reduce_max")(_reduction(np.max))
kernel("reduce_min")(_reduction(np.min))
