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


# From this many floats a transpose that swaps two blocks of axes runs compiled (numba is loaded
# then; ``jit.layout``), below it numpy's copy of the transposed view.
COMPILED_TRANSPOSE_MIN = 4096


def swapped_blocks(shape, perm) -> tuple[int, int, int] | None:
    """``(n, a, b)`` where ``perm`` keeps the leading axes and swaps the next two blocks of
    axes — ``x`` as [n, a, b] becomes [n, b, a], as ``(0, 2, 3, 1)`` turns NCHW into NHWC
    (a = C, b = H * W) and ``(0, 3, 1, 2)`` back; else None."""
    perm = tuple(perm)
    lead = 0
    while lead < len(perm) and perm[lead] == lead:
        lead += 1
    rest = perm[lead:]
    for cut in range(1, len(rest)):  # rest = (q .. end-1, lead .. q-1) for q = lead + len(rest) - cut
        q = lead + len(rest) - cut
        if rest == tuple(range(q, len(perm))) + tuple(range(lead, q)):
            size = lambda axes: int(np.prod([shape[i] for i in axes], dtype=np.int64))
            return size(range(lead)), size(range(lead, q)), size(range(q, len(perm)))
    return None


@kernel("transpose")
def _transpose(inputs, outputs, attrs, scratch):
    """A permutation of axes. Where it swaps two blocks of axes (:func:`swapped_blocks`) of a
    float32 array of at least :data:`COMPILED_TRANSPOSE_MIN` floats, each matrix of the stack
    is transposed in tiles of 8 x 8 blocks (``jit.layout.transpose_last``): ConvNeXt-T at batch
    8, both slices' transposes 36 -> 23 thread-ms a call (two runs minutes apart), the call
    0.975 of the time before (two handles in one process, both build orders)."""
    (x,), (out,) = inputs, outputs
    blocks = swapped_blocks(x.shape, attrs["perm"])
    if (blocks is not None and x.dtype == np.float32 and x.size >= COMPILED_TRANSPOSE_MIN and x.flags.c_contiguous
            and out.flags.c_contiguous and min(blocks[1:]) >= 8):
        from lowerkit.backend.cpu import jit

        n, a, b = blocks
        stack, turned = x.reshape(n, a, b), out.reshape(n, b, a)
        transpose = jit.load("layout").transpose_last
        return lambda: transpose(stack, turned, 0, n)
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
