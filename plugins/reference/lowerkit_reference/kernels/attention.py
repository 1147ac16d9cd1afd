"""``scaled_dot_product_attention`` in one piece: the oracle for backends that claim it."""

from __future__ import annotations

import numpy as np


def causal_mask(length: int, source: int) -> np.ndarray:
    """Bool [L, S]: position l may attend to s <= l (torch's tril of ones)."""
    return np.tril(np.ones((length, source), dtype=np.bool_))


def scaled_dot_product_attention(args, attrs):
    q, k, v = (a.astype(np.float64) for a in args[:3])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * attrs["scale"]
    if attrs["is_causal"]:
        scores = np.where(causal_mask(q.shape[-2], k.shape[-2]), scores, -np.inf)
    if len(args) > 3:
        mask = args[3]
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    with np.errstate(invalid="ignore"):  # a fully masked row is nan, as in torch
        e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
        weights = e / np.sum(e, axis=-1, keepdims=True)
    return np.matmul(weights, v).astype(args[0].dtype)


KERNELS = {"scaled_dot_product_attention": scaled_dot_product_attention}
