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
    nan (a row of -inf, or a nan in it), as numpy's exp gives them."""
    e = exp32(v)
    e = np.float32(0.0) if v < _UNDERFLOW else e
    return e if v == v else v


@njit(_SOFTMAX, nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def softmax_rows(x, out, log, first, last):
    """out[r] = softmax(x[r]) (or log-softmax when ``log``), max-subtracted, rows [first, last)."""
    d = x.shape[1]
    for r in range(first, last):
        src, dst = x[r], out[r]
        top = src[0]
        for j in range(d):
            top = max(top, src[j])
        total = 0.0
        if log:
            for j in range(d):
                total += _exp_shifted(src[j] - top)
            shift = top + math.log(total)
            for j in range(d):
                dst[j] = np.float32(src[j] - shift)
        else:
            for j in range(d):
                e = _exp_shifted(src[j] - top)
                dst[j] = e
                total += e
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
