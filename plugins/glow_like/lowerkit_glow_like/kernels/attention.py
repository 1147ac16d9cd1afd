"""``scaled_dot_product_attention`` as one instruction: scores, mask, softmax, weighted sum.

The two products are BLAS's (over every head at once); the mask is added to the scores in
place, and the softmax is the compiled ``jit.norm.softmax_rows`` from them into a buffer of
weights: one pass per row while it is in cache, with a vectorising exp. numpy's five passes over the scores
(max, subtract, exp, sum, divide) took 1.55 ms of the 2.7 of Swin-T's first-stage window
attention (64 windows x 3 heads of 49 x 49), its reductions along rows of 49 the slowest
(AMD EPYC Zen 3 VM, best of 30). The scale goes on the queries (a pass over ``L x E``
floats, not ``L x S`` scores), and the scores and weights live in buffers bound once: a
call with a float mask allocates nothing (DeiT-Tiny's scores are 460 KB a layer, which numpy had mapped
and unmapped every call).

On a team (one image on several cores) the threads take equal bands of the heads' query rows
(``jit.team.attention``; a band may end inside a head: DeiT-Tiny's three heads split by whole
heads had left one of two threads a third of the work): each head's rows' two products are
one ``cblas_sgemm`` each on their thread and their softmax runs between them while the scores
are in that core's cache; a mask is added
between two regions (the scores, then the rest). The plan holds BLAS at one thread for team
regions, so numpy's products had run every head on the calling thread alone: DeiT-Tiny's
attention took 5.3 ms a call (ONNX Runtime's three nodes 3.4 on two threads).

``glow.packed_attention(qkv[, mask])`` (``passes.attention`` makes it) is the same on a
transformer's packed projections: ``qkv`` [B, L, 3, H, E], one fully-connected layer's
output, to ``out`` [B, L, H, E]. Its heads are read and written where they lie (as strided
views; on a team, ``jit.team.packed_attention`` gives BLAS their row strides), so the split
of ``qkv`` into q, k and v, their three transposes to [B, H, L, E] and the output's transpose
back are not copies any more.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from lowerkit.backend.cpu.calls import on_team

from ._base import kernel


@kernel("scaled_dot_product_attention", team=True)
def _sdpa(inputs, outputs, attrs, scratch, team=None):
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    (out,) = outputs
    scale = np.float32(attrs["scale"])
    additive = None
    if attrs.get("is_causal", False):
        length, source = q.shape[-2], k.shape[-2]
        additive = np.where(np.tril(np.ones((length, source), bool)), 0, -np.inf).astype(q.dtype)
    kt = np.swapaxes(k, -1, -2)
    scores_shape = np.broadcast_shapes(q.shape[:-2], kt.shape[:-2]) + (q.shape[-2], kt.shape[-1])
    if (all(a.dtype == np.float32 for a in (q, k, v, out))
            and (mask is None or np.broadcast_shapes(scores_shape, mask.shape) == scores_shape)):
        # The weights go to a buffer of their own: written over the scores, LLVM's overlap check
        # between the softmax kernel's input and output rows fails and its scalar loop runs
        # (Swin-T's 64 x 3 x 49 x 49: 1.93 ms in place, 0.72 into another buffer; numpy's passes 1.56).
        scores, weights = np.empty(scores_shape, np.float32), np.empty(scores_shape, np.float32)
        serial = _bound(q, kt, v, out, scale, additive, mask, scores, weights)
        if team is not None and _on_team(q, k, v, out, team):
            return _team_bound(q, k, v, out, scale, additive, mask, scores, weights, team, serial)
        return serial

    def run():
        scores = np.matmul(q, kt)
        scores *= scale
        scores = _masked(scores, additive, mask)
        _softmax(scores)
        _weighted_sum(scores, v, out)

    return run


@kernel("glow.packed_attention", team=True)
def _packed_sdpa(inputs, outputs, attrs, scratch, team=None):
    qkv = inputs[0]
    mask = inputs[1] if len(inputs) > 1 else None
    (out,) = outputs
    batch, length, _, heads, depth = qkv.shape
    scale = np.float32(attrs["scale"])
    # [B, H, L, E] views of the packed operands and of the output: no copies.
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    out_heads = out.transpose(0, 2, 1, 3)
    scores, weights = (np.empty((batch, heads, length, length), np.float32) for _ in range(2))
    serial = _bound(q, np.swapaxes(k, -1, -2), v, out_heads, scale, None, mask, scores, weights)
    if team is None or not _packed_on_team(qkv, out, team):
        return serial
    kernels = team.kernels()
    qkv2, out2 = qkv.reshape(batch * length, -1), out.reshape(batch * length, -1)
    scores3, weights3 = (a.reshape(batch * heads, length, length) for a in (scores, weights))

    def phase(which):
        kernels.packed_attention(qkv2, out2, scores3, weights3, scale, which, heads, team.ways, team.sgemm)

    return on_team(team, _regions(kernels, phase, scores, None, mask), serial)


def _packed_on_team(qkv, out, team) -> bool:
    """Whether ``glow.packed_attention``'s heads can split on ``team``: float32 operands,
    C-contiguous, at least ``team_layers.MIN_FLOPS`` (as :func:`_on_team`), a team kernel there."""
    from lowerkit.backend.cpu import team_layers

    length = qkv.shape[1]
    flops = 4 * out.size * length  # the two products
    return (team.kernels().packed_attention is not None and flops >= team_layers.MIN_FLOPS
            and all(a.dtype == np.float32 and a.flags.c_contiguous for a in (qkv, out)))


def _bound(q, kt, v, out, scale, additive, mask, scores, weights):
    """The float32 form on the calling thread: ``scores`` and ``weights`` buffers bound once,
    the mask applied in place and the compiled row softmax (a mask that widens the scores
    takes the other form)."""
    from lowerkit.backend.cpu import jit

    softmax_rows = jit.load("norm").softmax_rows
    scaled = np.empty(q.shape, np.float32)
    flat, flat_weights = scores.reshape(-1, scores.shape[-1]), weights.reshape(-1, scores.shape[-1])
    count = flat.shape[0]

    def run():
        np.multiply(q, scale, out=scaled)
        np.matmul(scaled, kt, out=scores)
        _mask_in_place(scores, additive, mask)
        softmax_rows(flat, flat_weights, False, 0, count)
        _weighted_sum(weights, v, out)

    return run


def _on_team(q, k, v, out, team) -> bool:
    """Whether the heads can split on ``team``: every operand C-contiguous, the same leading
    (batch and head) dims — no broadcasting —, at least ``team_layers.MIN_FLOPS`` (as a
    convolution's team form), and a team kernel there (it needs a BLAS)."""
    from lowerkit.backend.cpu import team_layers

    lead = q.shape[:-2]
    flops = 2 * q.size * k.shape[-2] + 2 * out.size * k.shape[-2]  # the two products
    return (team.kernels().attention is not None and q.ndim >= 3 and flops >= team_layers.MIN_FLOPS
            and all(a.flags.c_contiguous and a.shape[:-2] == lead for a in (q, k, v, out)))


def _team_bound(q, k, v, out, scale, additive, mask, scores, weights, team, serial):
    """The heads in bands on ``team`` (``jit.team.attention``), one region — two with a mask,
    added in between —; ``serial`` while the team is off."""
    kernels = team.kernels()
    heads = int(np.prod(q.shape[:-2]))
    q3, k3, v3 = (a.reshape(heads, *a.shape[-2:]) for a in (q, k, v))
    out3 = out.reshape(heads, *out.shape[-2:])
    scores3, weights3 = (a.reshape(heads, *a.shape[-2:]) for a in (scores, weights))

    def phase(which):
        kernels.attention(q3, k3, v3, out3, scores3, weights3, scale, which, team.ways, team.sgemm)

    return on_team(team, _regions(kernels, phase, scores, additive, mask), serial)


def _regions(kernels, phase, scores, additive, mask):
    """A team call's regions: ``phase(kernels.WHOLE)`` without a mask; else the scores
    (``kernels.SCORES``), the masks added to ``scores`` on the calling thread, then the softmax
    and weighted sum (``kernels.WEIGHTED_SUM``)."""
    if additive is None and mask is None:
        return partial(phase, kernels.WHOLE)

    def regions():
        phase(kernels.SCORES)
        _mask_in_place(scores, additive, mask)
        phase(kernels.WEIGHTED_SUM)

    return regions


def _mask_in_place(scores, additive, mask) -> None:
    """The causal mask added to ``scores`` and ``mask`` applied (boolean: keep where true;
    float: added), in place: masks that broadcast to the scores' shape."""
    if additive is not None:
        np.add(scores, additive, out=scores)
    if mask is not None:
        if mask.dtype == np.bool_:
            np.copyto(scores, np.float32(-np.inf), where=np.logical_not(mask))
        else:
            np.add(scores, mask, out=scores)


def _masked(scores, additive, mask):
    """``scores`` with the causal mask added and ``mask`` applied (boolean: keep where true;
    float: added), in place where the shapes allow."""
    if additive is not None:
        scores += additive
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return scores


def _softmax(scores):
    """Softmax over the last axis of ``scores`` in place, in numpy (the form for other dtypes
    and widening masks). A fully masked row is nan, as in torch."""
    with np.errstate(invalid="ignore"):
        rows = np.max(scores, axis=-1, keepdims=True)
        np.subtract(scores, rows, out=scores)
        np.exp(scores, out=scores)
        np.divide(scores, np.sum(scores, axis=-1, keepdims=True), out=scores)


def _weighted_sum(scores, v, out):
    if scores.shape[:-2] == out.shape[:-2]:
        np.matmul(scores, v, out=out)
    else:  # v's batch dims widen the result
        np.copyto(out, np.matmul(scores, v))
