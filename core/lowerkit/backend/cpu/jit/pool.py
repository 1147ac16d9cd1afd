"""Pooling: max and average windows row by row, global average plane by plane.

A window pool builds each output row in place like the direct convolution: the row starts
at -inf (max) or 0 (sum), every window tap folds in the input row it reads over the output
columns whose input column is inside the image (padding never enters a max, and the
average divides by the caller's per-position divisor). Work is split by planes
``[first, last)`` of ``N * C``. The 3x3 max pool of the ResNets has a kernel of its own
(:func:`max_pool3x3`, where ``select.max_pool3x3_fits``): each output is one expression
of its nine taps, so a row is written once instead of read and written nine times.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._types import i8, ro, rw

_U = np.uint64

_WIN = types.void(ro(4), ro(2), rw(4), i8, i8, i8, i8, i8, i8, i8, i8, i8, i8, i8)
_GLOBAL = types.void(ro(4), rw(4), i8, i8)


@njit(_WIN, nogil=True, cache=True, error_model="numpy")
def pool2d(x, inv, out, is_max, kh_n, kw_n, sh, sw, pt, pl, dh, dw, first, last):
    """Max (``is_max``) or average pooling of planes [first, last); ``inv`` [OH, OW] holds
    1 / divisor for the average (unused for max). Flat unsigned indices in the inner loops
    (no negative-index checks, no per-row views)."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    start = np.float32(-np.inf) if is_max else np.float32(0)
    zero = np.float32(0)
    us = _U(sw)
    for p in range(first, last):
        xb = p * h * wd
        ob = p * oh_n * ow_n
        for oh in range(oh_n):
            d = ob + oh * ow_n
            for ow in range(ow_n):
                of[d + ow] = start
            for kh in range(kh_n):
                ih = oh * sh + kh * dh - pt
                if ih < 0 or ih >= h:
                    continue
                r = xb + ih * wd
                for kw in range(kw_n):
                    off = kw * dw - pl
                    lo = 0 if off >= 0 else (-off + sw - 1) // sw
                    hi = min(ow_n, (wd - 1 - off) // sw + 1) if wd - 1 - off >= 0 else 0
                    if hi <= lo:
                        continue
                    src, dst = _U(r + lo * sw + off), _U(d + lo)
                    if is_max:  # "+ 0": every lane stored (see _act.act_span's ReLU)
                        for i in range(_U(hi - lo)):
                            of[dst + i] = max(of[dst + i], xf[src + i * us]) + zero
                    else:
                        for i in range(_U(hi - lo)):
                            of[dst + i] += xf[src + i * us]
        if not is_max:
            invf = inv.reshape(-1)
            for q in range(_U(oh_n * ow_n)):
                of[_U(ob) + q] *= invf[q]


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def _max(a, b):
    return a if a > b else b  # a select: vectorises (Python's max() semantics otherwise)


@njit(types.void(ro(4), rw(4), i8, i8, i8, i8, i8), nogil=True, cache=True, error_model="numpy")
def max_pool3x3(x, out, stride, pt, pl, first, last):
    """3x3 max pooling, stride 1 or 2, of planes [first, last) (where ``select.max_pool3x3_fits``).

    Interior columns take one expression of the nine taps; a window row on padding reads
    a row of the window that is inside instead (repeating a value leaves a maximum
    unchanged), and the edge columns take the checked path.
    """
    h, wd = x.shape[2], x.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    u1, u2 = _U(1), _U(2)
    lo = min(ow_n, (pl + stride - 1) // stride)  # interior columns [lo, hi): whole window inside
    hi = max(lo, min(ow_n, (wd - 3 + pl) // stride + 1))
    for p in range(first, last):
        xb = p * h * wd
        ob = p * oh_n * ow_n
        for oh in range(oh_n):
            i0 = oh * stride - pt
            v0 = i0 if 0 <= i0 < h else (i0 + 1 if 0 <= i0 + 1 < h else i0 + 2)
            v1 = i0 + 1 if 0 <= i0 + 1 < h else v0
            v2 = i0 + 2 if 0 <= i0 + 2 < h else v1
            r0, r1, r2 = xb + v0 * wd, xb + v1 * wd, xb + v2 * wd
            d = ob + oh * ow_n
            for e in range(lo + ow_n - hi):  # edge columns: [0, lo) and [hi, ow_n)
                ow = e if e < lo else hi + e - lo
                m = np.float32(-np.inf)
                for kw in range(3):
                    iw = ow * stride - pl + kw
                    if 0 <= iw < wd:
                        m = _max(m, _max(xf[r0 + iw], _max(xf[r1 + iw], xf[r2 + iw])))
                of[d + ow] = m
            s = lo * stride - pl
            a0, a1, a2, ud = _U(r0 + s), _U(r1 + s), _U(r2 + s), _U(d + lo)
            if stride == 2:  # constant strides: the loads vectorise as interleaved loads
                for i in range(_U(hi - lo)):
                    j = i * u2
                    c0 = _max(_max(xf[a0 + j], xf[a1 + j]), xf[a2 + j])
                    c1 = _max(_max(xf[a0 + j + u1], xf[a1 + j + u1]), xf[a2 + j + u1])
                    c2 = _max(_max(xf[a0 + j + u2], xf[a1 + j + u2]), xf[a2 + j + u2])
                    of[ud + i] = _max(_max(c0, c1), c2)
            else:
                for i in range(_U(hi - lo)):
                    c0 = _max(_max(xf[a0 + i], xf[a1 + i]), xf[a2 + i])
                    c1 = _max(_max(xf[a0 + i + u1], xf[a1 + i + u1]), xf[a2 + i + u1])
                    c2 = _max(_max(xf[a0 + i + u2], xf[a1 + i + u2]), xf[a2 + i + u2])
                    of[ud + i] = _max(_max(c0, c1), c2)


@njit(types.float32(ro(1), i8, i8), nogil=True, cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def plane_mean(a, lo, hi):
    """The mean of ``a[lo:hi]``, summed in float64 lanes (reassociated: vectorised). The global
    average pool and the depthwise kernels' fused means (``means``) both call it, so a plane's
    mean is the same bits either way."""
    src = a[lo:hi]
    acc = 0.0
    for i in range(src.shape[0]):
        acc += src[i]
    return np.float32(acc / (hi - lo))


@njit(_GLOBAL, nogil=True, cache=True, error_model="numpy")
def global_avg_pool2d(x, out, first, last):
    """out[n, c, 0, 0] = mean of plane (n, c), for planes [first, last) (:func:`plane_mean`)."""
    c_n = x.shape[1]
    size = x.shape[2] * x.shape[3]
    flat = x.reshape(-1)
    for p in range(first, last):
        n = p // c_n
        out[n, p - n * c_n, 0, 0] = plane_mean(flat, p * size, (p + 1) * size)
