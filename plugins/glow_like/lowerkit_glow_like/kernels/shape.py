"""Data movement: reshape/flatten (copy form; the planner usually makes them views),
transpose, concat and plain copy."""

from __future__ import annotations

import numpy as np

from ._base import kernel


def _copy_reshaped(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    if np.shares_memory(x, out):  # planned as a view: nothing to move
        return lambda: None
    src = x.reshape(out.shape)
    return lambda: np.copyto(out, src)


for _op in ("reshape", "flatten", "glow.copy"):
    kernel(_op)(_copy_reshaped)


@kernel("transpose")
def _transpose(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    src = x.transpose(tuple(attrs["perm"]))
    return lambda: np.copyto(out, src)


@kernel("concat")
def _concat(inputs, outputs, attrs, scratch):
    (out,) = outputs
    dim = attrs.get("dim", 0)
    xs = tuple(inputs)
    return lambda: np.concatenate(xs, axis=dim, out=out)
