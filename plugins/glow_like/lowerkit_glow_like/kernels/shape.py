"""Data movement: reshape/flatten (copy form; the planner usually makes them views),
transpose, concat, plain copy and row gathers."""

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


@kernel("glow.gather_rows")
def _gather_rows(inputs, outputs, attrs, scratch):
    """``out`` row r = ``x`` row ``rows[r]``, rows over the last dimension (``passes/gather.py``).
    The row numbers are checked once, here: a payload's out-of-range ones fail the binding."""
    x, rows = inputs
    (out,) = outputs
    width = x.shape[-1]
    source, target = x.reshape(-1, width), out.reshape(-1, width)
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= source.shape[0]):
        raise ValueError(f"glow.gather_rows: row numbers must be in [0, {source.shape[0]}), "
                         f"got [{int(rows.min())}, {int(rows.max())}]")
    index = rows.astype(np.intp)
    return lambda: np.take(source, index, axis=0, out=target, mode="clip")
