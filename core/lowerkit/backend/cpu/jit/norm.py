"""Softmax, log-softmax and layer norm over the last axis of a [rows, D] view: one row at a
time, so the row is read from memory once and its passes (max, exp-sum, scale; or mean,
variance, normalise) run on cache. Statistics accumulate in float64. Work is split by
rows ``[first, last)``. The exponentials are :func:`._act.exp32`'s, which vectorise (libm's
``exp`` is a call per value: the kernel had lost to numpy's five passes on attention's scores)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from ._act import exp32
from ._types import f8, i8, ro, rw

_SOFTMAX = types.void(ro(2), rw(2), types.boolean, i8, i8)
_LAYER_NORM = types.void(ro(2), ro(1), ro(1), rw(2), f8, i8, i8)


_UNDERFLOW = np.float32(-87.3)  # exp32's lower clamp: below it numpy's exp is 0 (or subnormal)


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def _exp_shifted(v):
    """exp of a max-subtracted score: 0 below exp32's range (a key masked with -inf), nan for
    nan (a row of -inf, or a nan in it), as numpy's exp gives them. The nan comes through
    ``v - v`` (0 for any finite ``v``) rather than a select on ``v == v``: that select kept
    LLVM's vector loop at ~1.1 ns a value against ~0.35 without it (AMD EPYC Zen 3 VM)."""
    e = exp32(v) + (v - v)
    return np.float32(0.0) if v < _UNDERFLOW else e


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def _larger(a, b):
    return b if b > a else a


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def _row_max(s, d):
    """The largest of ``s[:d]`` in eight running maxima, one per lane of a vector: rows of 197,
    one thread, 0.16 ns a value against one running maximum's 0.26 (which nnan did not speed
    up; AMD EPYC Zen 3 VM, my script)."""
    full = d // 8 * 8
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = s[0]
    for j in range(0, full, 8):
        a0, a1, a2, a3 = _larger(a0, s[j]), _larger(a1, s[j + 1]), _larger(a2, s[j + 2]), _larger(a3, s[j + 3])
        a4, a5, a6, a7 = _larger(a4, s[j + 4]), _larger(a5, s[j + 5]), _larger(a6, s[j + 6]), _larger(a7, s[j + 7])
    top = _larger(_larger(_larger(a0, a1), _larger(a2, a3)), _larger(_larger(a4, a5), _larger(a6, a7)))
    for j in range(full, d):
        top = _larger(top, s[j])
    return top


# Softmax runs blocks of rows of about this many floats (16 KB: in L1 between its passes).
SOFTMAX_BLOCK_FLOATS = 4096


@njit(_SOFTMAX, nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def softmax_rows(x, out, log, first, last):
    """out[r] = softmax(x[r]) (or log-softmax when ``log``), max-subtracted, rows [first, last)
    (``out`` may be ``x``). Softmax goes a block of rows at a time: each row's shifted scores
    into ``out``, then the exponentials in one loop over the whole block — a loop per row left
    a scalar remainder of up to 31 values per row (DeiT's 197, Swin's 49) —, then each row's
    sum and scale. Block / row by row, one thread: 0.66-0.80 of the time at 2364 x 197 and
    4704 x 49 (AMD EPYC Zen 3 VM, my script)."""
    d = x.shape[1]
    if d == 0:
        return
    if log:
        for r in range(first, last):
            src, dst = x[r], out[r]
            top = _row_max(src, d)
            total = 0.0
            for j in range(d):
                total += _exp_shifted(src[j] - top)
            shift = top + math.log(total)
            for j in range(d):
                dst[j] = np.float32(src[j] - shift)
        return
    flat = out.reshape(-1)
    step = max(1, SOFTMAX_BLOCK_FLOATS // d)
    for b0 in range(first, last, step):
        b1 = min(last, b0 + step)
        for r in range(b0, b1):
            src, dst = x[r], out[r]
            top = _row_max(src, d)
            for j in range(d):
                dst[j] = src[j] - top
        block = flat[b0 * d : b1 * d]
        for i in range(block.shape[0]):
            block[i] = _exp_shifted(block[i])
        for r in range(b0, b1):
            dst = out[r]
            total = 0.0
            for j in range(d):
                total += dst[j]
            scale = np.float32(1.0 / total)
            for j in range(d):
                dst[j] *= scale


@njit(_LAYER_NORM, nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def layer_norm_rows(x, weight, bias, out, eps, first, last):
    """out[r] = (x[r] - mean) / sqrt(var + eps) * weight + bias (weight/bias of length 0: none)."""
    d = x.shape[1]
    has_w, has_b = weight.shape[0] > 0, bias.shape[0] > 0
    for r in range(first, last):
        src, dst = x[r], out[r]
        total = 0.0
        for j in range(d):
            total += src[j]
        mean = total / d
        var = 0.0
        for j in range(d):
            dev = src[j] - mean
            var += dev * dev
        inv = np.float32(1.0 / math.sqrt(var / d + eps))
        m32 = np.float32(mean)
        if has_w and has_b:
            for j in range(d):
                dst[j] = (src[j] - m32) * inv * weight[j] + bias[j]
        elif has_w:
            for j in range(d):
                dst[j] = (src[j] - m32) * inv * weight[j]
        else:
            for j in range(d):
                dst[j] = (src[j] - m32) * inv
            if has_b:
                for j in range(d):
                    dst[j] += bias[j]
