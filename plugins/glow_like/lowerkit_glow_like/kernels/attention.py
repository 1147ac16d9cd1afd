"""``scaled_dot_product_attention`` as one instruction: scores, mask, softmax, weighted sum.

The two products are BLAS's (over every head at once); the scale goes on the queries (a
pass over ``L x E`` floats, not ``L x S`` scores), and the softmax is one compiled pass per
row of scores (``jit.norm.softmax_rows``) instead of numpy's five over the whole score
tensor. The scores live in a buffer bound once.
"""

from __future__ import annotations

import numpy as np

from ._base import kernel


@kernel("scaled_dot_product_attention")
def _sdpa(inputs, outputs, attrs, scratch):
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    (out,) = outputs
    scale = np.float32(attrs["scale"])
    additive = None
    if attrs.get("is_causal", False):
        length, source = q.shape[-2], k.shape[-2]
        additive = np.where(np.tril(np.ones((length, source), bool)), 0, -np.inf).astype(q.dtype)
    kt = np.swapaxes(k, -1, -2)
    if all(a.dtype == np.float32 for a in (q, k, v, out)):
        return _compiled_softmax(q, kt, v, out, scale, additive, mask)

    def run():
        scores = np.matmul(q, kt)
        scores *= scale
        scores = _masked(scores, additive, mask)
        with np.errstate(invalid="ignore"):  # a fully masked row is nan, as in torch
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
        _weighted_sum(scores, v, out)

    return run


def _compiled_softmax(q, kt, v, out, scale, additive, mask):
    from lowerkit.backend.cpu import jit

    softmax_rows = jit.load("norm").softmax_rows
    scaled = np.empty(q.shape, np.float32)
    scores = np.empty(np.broadcast_shapes(q.shape[:-2], kt.shape[:-2]) + (q.shape[-2], kt.shape[-1]), np.float32)
    rows = scores.size // scores.shape[-1]

    def run():
        np.multiply(q, scale, out=scaled)
        np.matmul(scaled, kt, out=scores)
        masked = _masked(scores, additive, mask)
        flat = np.ascontiguousarray(masked).reshape(rows, -1)
        softmax_rows(flat, flat, False, 0, rows)  # a fully masked row is nan, as in torch
        _weighted_sum(flat.reshape(masked.shape), v, out)

    return run


def _masked(scores, additive, mask):
    """``scores`` with the causal mask added and ``mask`` applied (boolean: keep where true;
    float: added), in place where the shapes allow."""
    if additive is not None:
        scores += additive
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return scores


def _weighted_sum(scores, v, out):
    if scores.shape[:-2] == out.shape[:-2]:
        np.matmul(scores, v, out=out)
    else:  # v's batch dims widen the result
        np.copyto(out, np.matmul(scores, v))
