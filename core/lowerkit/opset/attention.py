"""``scaled_dot_product_attention``: one op a backend may claim whole; the core decomposes it
(:mod:`lowerkit.opset.decompose`) into matmul, softmax and friends for one that does not.

q ``[..., L, E]``, k ``[..., S, E]``, v ``[..., S, Ev]`` -> ``[..., L, Ev]``; leading dims
broadcast. The optional ``attn_mask`` broadcasts to ``[..., L, S]``: a bool mask keeps the
positions where it is true, a float mask is added to the scores.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._checks import require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register


def _sdpa(types, attrs):
    q, k, v = types[:3]
    op = "scaled_dot_product_attention"
    require_same_dtype(op, [("query", q), ("key", k), ("value", v)])
    require_float(op, "query", q)
    if min(q.rank, k.rank, v.rank) < 2:
        raise ShapeError(f"{op}: query, key and value must have rank >= 2, got {q}, {k}, {v}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"{op}: query has {q.shape[-1]} features but key has {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{op}: key has {k.shape[-2]} positions but value has {v.shape[-2]}")
    try:
        batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        scores = batch + (q.shape[-2], k.shape[-2])
        if len(types) > 3:
            mask = types[3]
            if mask.dtype != "bool" and mask.dtype != q.dtype:
                raise ShapeError(f"{op}: attn_mask must be bool or {q.dtype}, got {mask}")
            if tuple(np.broadcast_shapes(mask.shape, scores)) != scores:
                raise ValueError
    except ValueError:
        raise ShapeError(
            f"{op}: shapes do not broadcast: query {list(q.shape)}, key {list(k.shape)}, value "
            f"{list(v.shape)}" + (f", attn_mask {list(types[3].shape)}" if len(types) > 3 else "")
        ) from None
    if not attrs["scale"] > 0:
        raise ShapeError(f"{op}: scale must be > 0, got {attrs['scale']}")
    return [TensorType(q.dtype, batch + (q.shape[-2], v.shape[-1]))]


register(OpSchema(
    "scaled_dot_product_attention", ("query", "key", "value", "attn_mask"), _sdpa,
    attrs=(
        AttrSpec("scale", "float", doc="multiplies q @ k^T (torch's default is 1 / sqrt(E))"),
        AttrSpec("is_causal", "bool", False, doc="position l attends to positions s <= l only"),
    ),
    num_optional=1,
    doc="softmax(q @ k^T * scale + mask) @ v, as torch.nn.functional.scaled_dot_product_attention "
    "(no dropout): a bool attn_mask keeps the true positions, a float one is added; is_causal masks "
    "the upper triangle. Backends may claim it whole; the core can decompose it.",
))
