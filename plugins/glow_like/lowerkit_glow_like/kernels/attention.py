"""``scaled_dot_product_attention`` as one instruction: scores, mask, softmax, weighted sum."""

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

    def run():
        scores = np.matmul(q, kt)
        scores *= scale
        if additive is not None:
            scores += additive
        if mask is not None:
            scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
        with np.errstate(invalid="ignore"):  # a fully masked row is nan, as in torch
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
        if scores.shape[:-2] == out.shape[:-2]:
            np.matmul(scores, v, out=out)
        else:  # v's batch dims widen the result
            np.copyto(out, np.matmul(scores, v))

    return run
