"""Compiled convolution kernels: direct grouped and depthwise convolution with bias and a
fused activation, the GEMM epilogue, and im2col.

- :func:`conv2d_grouped` — any grouped convolution, tap by tap (below);
- :func:`depthwise3x3_same` / :func:`depthwise3x3_s2` — depthwise 3x3 with padding 1, stride 1
  (flat passes over each plane) or 2 (flat passes over the plane's four phases);
- :func:`depthwise_blocked` — depthwise 3x3, 5x5 or 7x7, stride 1 or 2, on channels-last
  blocks of 8 planes (from :mod:`.dwblock`, re-exported so one kernel module serves a layer);
- :func:`depthwise_rows` — depthwise 3x3, 5x5 or 7x7, stride 1 or 2, straight on the NCHW rows
  in masked vectors (from :mod:`.dwrows`, re-exported likewise);
- :func:`depthwise_channels_last` — any other depthwise kernel on a channels-last copy;
- :func:`bias_activation` / :func:`activate` — a GEMM convolution's epilogue, in place;
- :func:`im2col` — output rows of one image's column matrix, padding written as zeros.

:func:`conv2d_grouped` builds each output plane ``(n, oc)`` row by row in place: the row
starts as the bias, every kernel tap adds ``w * x[row of the tap]`` over the output columns
whose input column lies inside the image (so padding costs nothing), then the activation runs
on the row while it is in L1. Channels of a group are the inner loop, so a depthwise plane
reads its one input plane KH*KW times from cache. Work is split by planes: a worker gets
``[first, last)`` of ``N * OC``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._act import act_span
from .pool import plane_mean
from ._simd import split_pairs, take_evens
from .dwblock import depthwise_blocked  # noqa: F401  (re-exported: see the list above)
from .dwrows import depthwise_rows  # noqa: F401  (re-exported: see the list above)
from ._types import f8, i8, ro, rw

_SIG = types.void(ro(4), ro(4), ro(1), rw(4), i8, i8, i8, i8, i8, i8, i8, i8, f8, f8, i8, i8)


@njit(_SIG, nogil=True, cache=True, error_model="numpy")
def conv2d_grouped(x, w, bias, out, sh, sw, pt, pl, dh, dw, groups, code, p0, p1, first, last):
    """out[n, oc] = act(bias[oc] + sum over the group's channels and taps) for planes [first, last).

    ``bias`` of length 0 means no bias. Padding is (pt, pl) at the top/left; the bottom and
    right padding follow from the output size.
    """
    h, wd = x.shape[2], x.shape[3]
    oc_n, cg, kh_n, kw_n = w.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    ocg = oc_n // groups
    has_bias = bias.shape[0] > 0
    for p in range(first, last):
        n = p // oc_n
        oc = p - n * oc_n
        c0 = (oc // ocg) * cg
        b = bias[oc] if has_bias else np.float32(0)
        for oh in range(oh_n):
            row = out[n, oc, oh]
            for ow in range(ow_n):
                row[ow] = b
            for ci in range(cg):
                for kh in range(kh_n):
                    ih = oh * sh + kh * dh - pt
                    if ih < 0 or ih >= h:
                        continue
                    src = x[n, c0 + ci, ih]
                    for kw in range(kw_n):
                        wv = w[oc, ci, kh, kw]
                        off = kw * dw - pl
                        lo = 0 if off >= 0 else (-off + sw - 1) // sw
                        hi = min(ow_n, (wd - 1 - off) // sw + 1) if wd - 1 - off >= 0 else 0
                        if hi <= lo:
                            continue
                        # Slices so the loops index from 0: no negative-index wraparound
                        # check per element, and the stride-1 loop vectorises.
                        dst = row[lo:hi]
                        if sw == 1:
                            s1 = src[lo + off : hi + off]
                            for i in range(hi - lo):
                                dst[i] += wv * s1[i]
                        else:
                            s2 = src[lo * sw + off :]
                            for i in range(hi - lo):
                                dst[i] += wv * s2[i * sw]
            act_span(row, 0, ow_n, code, p0, p1)


_U = np.uint64


_SIG_SAME = types.void(ro(4), ro(4), ro(1), rw(4), rw(1), i8, f8, f8, i8, i8)


@njit(_SIG_SAME, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def depthwise3x3_same(x, w, bias, out, means, code, p0, p1, first, last):
    """Depthwise 3x3, stride 1, padding 1 on every side (output plane = input plane, at
    least 3x3), planes [first, last): each plane in flat passes that vectorise whole.

    The rows between the first and the last are one flat loop over the plane with all nine
    taps: on a row's first or last column a tap one column to the side reads the
    neighbouring row's end, so those two columns of every row are computed again after it,
    without those taps. (Selecting the taps out with a column mask in the loop cost a third
    more: 144x56x56 265 against 183 µs, one thread.) The first and last rows are flat loops
    of their own without the missing row; the four corners are single expressions. Every
    read stays inside the plane. Bias is added in the loops, then the activation applied.
    """
    h, wd = x.shape[2], x.shape[3]
    hw = h * wd
    c_n = x.shape[1]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    zero = np.float32(0)
    has_bias = bias.shape[0] > 0
    u1, uw = _U(1), _U(wd)
    for p in range(first, last):
        oc = p % c_n
        b = bias[oc] if has_bias else zero
        k = oc * 9
        w00, w01, w02 = wf[k], wf[k + 1], wf[k + 2]
        w10, w11, w12 = wf[k + 3], wf[k + 4], wf[k + 5]
        w20, w21, w22 = wf[k + 6], wf[k + 7], wf[k + 8]
        o = _U(p * hw)
        for f in range(_U(wd + 1), _U(hw - wd - 1)):  # middle rows; their edge columns again below
            a = o + f
            up, dn = a - uw, a + uw
            of[a] = (b + w01 * xf[up] + w11 * xf[a] + w21 * xf[dn]
                     + w00 * xf[up - u1] + w10 * xf[a - u1] + w20 * xf[dn - u1]
                     + w02 * xf[up + u1] + w12 * xf[a + u1] + w22 * xf[dn + u1])
        for r in range(1, h - 1):  # a middle row's first column (no left taps), then its last
            a = o + _U(r * wd)
            up, dn = a - uw, a + uw
            of[a] = (b + w01 * xf[up] + w11 * xf[a] + w21 * xf[dn]
                     + w02 * xf[up + u1] + w12 * xf[a + u1] + w22 * xf[dn + u1])
            a += uw - u1
            up, dn = a - uw, a + uw
            of[a] = (b + w01 * xf[up] + w11 * xf[a] + w21 * xf[dn]
                     + w00 * xf[up - u1] + w10 * xf[a - u1] + w20 * xf[dn - u1])
        for f in range(u1, _U(wd - 1)):  # first row, no row above
            a = o + f
            of[a] = (b + w10 * xf[a - u1] + w11 * xf[a] + w12 * xf[a + u1]
                     + w20 * xf[a + uw - u1] + w21 * xf[a + uw] + w22 * xf[a + uw + u1])
        for f in range(_U(hw - wd + 1), _U(hw - 1)):  # last row, no row below
            a = o + f
            of[a] = (b + w00 * xf[a - uw - u1] + w01 * xf[a - uw] + w02 * xf[a - uw + u1]
                     + w10 * xf[a - u1] + w11 * xf[a] + w12 * xf[a + u1])
        a = o  # top-left corner
        of[a] = b + w11 * xf[a] + w12 * xf[a + u1] + w21 * xf[a + uw] + w22 * xf[a + uw + u1]
        a = o + uw - u1  # top-right corner
        of[a] = b + w10 * xf[a - u1] + w11 * xf[a] + w20 * xf[a + uw - u1] + w21 * xf[a + uw]
        a = o + _U(hw) - uw  # bottom-left corner
        of[a] = b + w01 * xf[a - uw] + w02 * xf[a - uw + u1] + w11 * xf[a] + w12 * xf[a + u1]
        a = o + _U(hw) - u1  # bottom-right corner
        of[a] = b + w00 * xf[a - uw - u1] + w01 * xf[a - uw] + w10 * xf[a - u1] + w11 * xf[a]
        act_span(of, p * hw, (p + 1) * hw, code, p0, p1)
        if means.shape[0] > 0:
            means[p] = plane_mean(of, p * hw, (p + 1) * hw)


_SIG_S2 = types.void(ro(4), ro(4), ro(1), rw(1), rw(4), rw(1), i8, f8, f8, i8, i8)


@njit(_SIG_S2, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def depthwise3x3_s2(x, w, bias, phases, out, means, code, p0, p1, first, last):
    """Depthwise 3x3, stride 2, padding 1 at the top and left, even input sides (output
    H/2 x W/2, at least 2x2), planes [first, last): polyphase.

    Each input plane is split into its four phases (even/odd rows x even/odd columns, each
    the output's size) in ``phases`` scratch (at least 4*OH*OW), a row pair at a time by
    vector shuffles (``_simd.split_pairs``: as a plain loop the split stayed scalar and cost
    most of the layer); on them the stride-2 window is a stride-1 stencil of nine taps at
    offsets 0, -1, -OW, -OW-1 of the output's flat index, run as flat passes like
    :func:`depthwise3x3_same` (the first column of each row again without its left taps).
    Instead of nine stride-2 loads on rows of OW outputs. ``means``: as
    :func:`depthwise3x3_same`'s.
    """
    h, wd = x.shape[2], x.shape[3]
    c_n = x.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    n_out = oh * ow
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    ee, eo = phases[0:n_out], phases[n_out:2 * n_out]  # even rows: even, odd columns
    oe, oo = phases[2 * n_out:3 * n_out], phases[3 * n_out:4 * n_out]  # odd rows
    zero = np.float32(0)
    has_bias = bias.shape[0] > 0
    u1, uo, uno = _U(1), _U(ow), _U(n_out)
    xa, pa = _U(xf.ctypes.data), _U(phases.ctypes.data)
    for p in range(first, last):
        oc = p % c_n
        b = bias[oc] if has_bias else zero
        src = _U(p * h * wd)
        for r in range(oh):  # the row pair 2r, 2r + 1 into the four phases' row r
            even, odd, d = src + _U(2 * r * wd), src + _U((2 * r + 1) * wd), _U(r * ow)
            split_pairs(xf, xa, even, phases, pa, d, phases, pa, uno + d, uo)
            split_pairs(xf, xa, odd, phases, pa, _U(2) * uno + d, phases, pa, _U(3) * uno + d, uo)
        k = oc * 9
        w00, w01, w02 = wf[k], wf[k + 1], wf[k + 2]
        w10, w11, w12 = wf[k + 3], wf[k + 4], wf[k + 5]
        w20, w21, w22 = wf[k + 6], wf[k + 7], wf[k + 8]
        o = _U(p * n_out)
        for f in range(uo + u1, _U(n_out)):  # from row 1, column 1 on; first columns again below
            of[o + f] = (b + w11 * ee[f] + w12 * eo[f] + w21 * oe[f] + w22 * oo[f]
                         + w01 * oe[f - uo] + w02 * oo[f - uo]
                         + w10 * eo[f - u1] + w20 * oo[f - u1] + w00 * oo[f - uo - u1])
        for r in range(1, oh):  # a row's first column: no left taps
            f = _U(r * ow)
            of[o + f] = (b + w11 * ee[f] + w12 * eo[f] + w21 * oe[f] + w22 * oo[f]
                         + w01 * oe[f - uo] + w02 * oo[f - uo])
        for f in range(u1, uo):  # first row: no row above
            of[o + f] = (b + w11 * ee[f] + w12 * eo[f] + w21 * oe[f] + w22 * oo[f]
                         + w10 * eo[f - u1] + w20 * oo[f - u1])
        of[o] = b + w11 * ee[0] + w12 * eo[0] + w21 * oe[0] + w22 * oo[0]
        act_span(of, p * n_out, (p + 1) * n_out, code, p0, p1)
        if means.shape[0] > 0:
            means[p] = plane_mean(of, p * n_out, (p + 1) * n_out)


_SIGCL = types.void(ro(4), ro(2), ro(1), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, i8, f8, f8, i8, i8)


@njit(_SIGCL, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def depthwise_channels_last(xp, wt, bias, acc, oh_n, ow_n, kh_n, kw_n, sh, sw, dh, dw, code, p0, p1, c0, c1):
    """Depthwise taps on a channels-last padded image, channels [c0, c1): for small planes
    (7x7 .. 32x32), whose rows are too short for the NCHW kernels, the innermost loop runs
    over channels instead.

    ``xp`` [N, Hp, Wp, C] is the zero-padded image, ``wt`` the weight as [KH*KW, C], ``acc``
    [N, OH*OW, C] receives act(bias + taps). (The caller moves NCHW in and out.) 3x3
    undilated kernels are one expression of nine taps per element; others accumulate.
    Flat unsigned indices throughout: a slice per pixel and tap (an array view, two atomic
    reference-count updates each) cost more than the arithmetic on 7x7 planes.
    """
    c_n = xp.shape[3]
    hp, wp = xp.shape[1], xp.shape[2]
    nc = _U(c1 - c0)
    zero = np.float32(0)
    has_bias = bias.shape[0] > 0
    unrolled = kh_n == 3 and kw_n == 3 and dh == 1 and dw == 1
    xf, wf, af = xp.reshape(-1), wt.reshape(-1), acc.reshape(-1)
    uc = _U(c_n)
    row = _U(wp * c_n)  # one padded row of the channels-last image
    wk = [_U(t * c_n + c0) for t in range(9)] if unrolled else [_U(0)]
    for n in range(xp.shape[0]):
        for oh in range(oh_n):
            for ow in range(ow_n):
                a = _U(((n * oh_n + oh) * ow_n + ow) * c_n + c0)
                x0 = _U(((n * hp + oh * sh) * wp + ow * sw) * c_n + c0)  # tap (0, 0)
                if unrolled:
                    x1, x2 = x0 + uc, x0 + _U(2) * uc
                    x3, x4, x5 = x0 + row, x1 + row, x2 + row
                    x6, x7, x8 = x3 + row, x4 + row, x5 + row
                    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wk[0], wk[1], wk[2], wk[3], wk[4], wk[5], wk[6], wk[7], wk[8]
                    for k in range(nc):
                        af[a + k] = (wf[w0 + k] * xf[x0 + k] + wf[w1 + k] * xf[x1 + k] + wf[w2 + k] * xf[x2 + k]
                                     + wf[w3 + k] * xf[x3 + k] + wf[w4 + k] * xf[x4 + k] + wf[w5 + k] * xf[x5 + k]
                                     + wf[w6 + k] * xf[x6 + k] + wf[w7 + k] * xf[x7 + k] + wf[w8 + k] * xf[x8 + k])
                else:
                    for k in range(nc):
                        af[a + k] = zero
                    for kh in range(kh_n):
                        xs = x0 + _U(kh * dh * wp * c_n)
                        ws = _U(kh * kw_n * c_n + c0)
                        if kw_n == 5:  # a kernel row as one expression (5x5: EfficientNet, MixNet)
                            d1, d2, d3, d4 = _U(dw * c_n), _U(2 * dw * c_n), _U(3 * dw * c_n), _U(4 * dw * c_n)
                            for k in range(nc):
                                af[a + k] += (wf[ws + k] * xf[xs + k] + wf[ws + uc + k] * xf[xs + d1 + k]
                                              + wf[ws + _U(2) * uc + k] * xf[xs + d2 + k]
                                              + wf[ws + _U(3) * uc + k] * xf[xs + d3 + k]
                                              + wf[ws + _U(4) * uc + k] * xf[xs + d4 + k])
                        elif kw_n == 3:
                            d1, d2 = _U(dw * c_n), _U(2 * dw * c_n)
                            for k in range(nc):
                                af[a + k] += (wf[ws + k] * xf[xs + k] + wf[ws + uc + k] * xf[xs + d1 + k]
                                              + wf[ws + _U(2) * uc + k] * xf[xs + d2 + k])
                        else:
                            for kw in range(kw_n):
                                xk = xs + _U(kw * dw * c_n)
                                wk_ = ws + _U(kw * c_n)
                                for k in range(nc):
                                    af[a + k] += wf[wk_ + k] * xf[xk + k]
                if has_bias:
                    bs = _U(c0)
                    for k in range(nc):
                        af[a + k] += bias[bs + k]
                act_span(af, a, a + nc, code, p0, p1)


@njit(types.void(rw(1), i8, f8, f8), nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def activate(a, code, p0, p1):
    """``a = act(a)`` in place (the fused activation of kernels whose epilogue is numpy)."""
    act_span(a, 0, a.shape[0], code, p0, p1)


_SUM_CHUNK = 4096  # floats of the sum activated while in L1


@njit(types.void(ro(2), ro(1), rw(2)), nogil=True, cache=True, error_model="numpy")
def scale_rows(x, gate, out):
    """``out[r, :] = x[r, :] * gate[r]`` (``out`` may be ``x``): a squeeze-excitation gate
    applied to a map's planes (rows). numpy's broadcast multiply took ~10 us for 576 planes of
    49 pixels. In place, the one-array loop (see :func:`add_activation`)."""
    rows, n = out.shape[0], out.shape[1]
    if out.ctypes.data == x.ctypes.data:
        for r in range(rows):
            g = gate[r]
            row = out[r]
            for j in range(n):
                row[j] *= g
    else:
        for r in range(rows):
            g = gate[r]
            src, row = x[r], out[r]
            for j in range(n):
                row[j] = src[j] * g


@njit(types.void(ro(1), ro(1), rw(1), i8, f8, f8), nogil=True, cache=True, error_model="numpy",
      fastmath={"contract"})
def add_activation(a, b, out, code, p0, p1):
    """``out = act(a + b)`` over flat float32 arrays of one size (``out`` may be ``a`` or
    ``b``): a residual sum and its activation in one pass over memory, the sum activated
    ``_SUM_CHUNK`` floats at a time while in L1 (numpy's add and then an activation pass
    read and write the output twice).

    An ``out`` that is an operand gets the in-place loop ``out += other``: in the
    three-array loop LLVM's overlap check then fails and the scalar loop runs (75k floats
    in L1/L2: 34 us against numpy's 8; in place, 7.5)."""
    n = out.shape[0]
    if n == 0:
        return
    other = b if out.ctypes.data == a.ctypes.data else a if out.ctypes.data == b.ctypes.data else out
    for lo in range(0, n, _SUM_CHUNK):
        hi = min(n, lo + _SUM_CHUNK)
        so = out[lo:hi]
        if other.ctypes.data != out.ctypes.data:
            so_other = other[lo:hi]
            for i in range(hi - lo):
                so[i] += so_other[i]
        else:
            sa, sb = a[lo:hi], b[lo:hi]
            for i in range(hi - lo):
                so[i] = sa[i] + sb[i]
        act_span(out, lo, hi, code, p0, p1)


def _bias_activation(a, bias, code, p0, p1):
    """``a[r] = act(a[r] + bias[r % len(bias)])`` for every row of ``a`` [rows, pixels] in
    place (bias of length 0: none) — a GEMM convolution's epilogue in one pass over memory
    (numpy would take one pass for the bias and one for the activation)."""
    nb = bias.shape[0]
    n = a.shape[1]
    for r in range(a.shape[0]):
        row = a[r]
        if nb > 0:
            b = bias[r % nb]
            for i in range(n):
                row[i] += b
        act_span(row, 0, n, code, p0, p1)


_BIAS_ACT = [types.void(types.Array(types.float32, 2, layout), ro(1), i8, f8, f8) for layout in ("C", "A")]
_FLAGS = dict(nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
bias_activation = njit(_BIAS_ACT, **_FLAGS)(_bias_activation)



_IM2COL_SIG = types.void(ro(3), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, i8, i8)


@njit(inline="always")
def _zero_padding(cf, d, ow_n, lo, hi, inside):
    """Zeros where the column row at ``d`` reads padding: all of it for an input row outside
    the image (not ``inside``), else the columns outside ``[lo, hi)``."""
    zero = np.float32(0)
    if not inside:
        for i in range(_U(ow_n)):
            cf[_U(d) + i] = zero
        return
    for i in range(lo):
        cf[d + i] = zero
    for i in range(hi, ow_n):
        cf[d + i] = zero


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def _im2col_shifted(x, col, kh_n, kw_n, pt, pl, first, last):
    """:func:`im2col` for stride 1, no dilation and output rows as wide as the input's (a
    "same" convolution): a tap's rows [first, last) of a channel are the plane's flat run
    shifted by ``(kh - pt) * W + kw - pl`` — one copy over the whole band, not one per
    output row (a 7x7 plane has rows of 7) —, then zeros where the tap reads padding: the
    rows above or below the image, and the ``|kw - pl|`` columns at a row's edge that read
    the neighbouring row instead (one thread: 512x7x7 3x3 176 -> 97 µs, 256x14x14 199 ->
    93, 128x28x28 263 -> 146; 64x56x56 326 -> 306)."""
    c_n, h, wd = x.shape[0], x.shape[1], x.shape[2]
    hw, pixels = h * wd, col.shape[1] * wd
    xf, cf = x.reshape(-1), col.reshape(-1)
    zero = np.float32(0)
    f0, f1 = first * wd, last * wd
    for kh in range(kh_n):
        r_lo = min(last, max(first, pt - kh))  # output rows whose input row lies in the image
        r_hi = max(r_lo, min(last, h + pt - kh))
        for kw in range(kw_n):
            dc = kw - pl
            s = (kh - pt) * wd + dc  # column row index f reads the plane at f + s
            lo = max(r_lo * wd, -s)
            hi = max(lo, min(r_hi * wd, hw - s))
            edge_lo, edge_hi = (0, min(wd, -dc)) if dc < 0 else (max(0, wd - dc), wd)
            for c in range(c_n):
                row = ((c * kh_n + kh) * kw_n + kw) * pixels
                for f in range(_U(row + f0), _U(row + lo)):
                    cf[f] = zero
                src, dst = _U(c * hw + s + lo), _U(row + lo)
                for q in range(_U(hi - lo)):
                    cf[dst + q] = xf[src + q]
                for f in range(_U(row + hi), _U(row + f1)):
                    cf[f] = zero
                if dc != 0:
                    for r in range(r_lo, r_hi):
                        d = _U(row + r * wd)
                        for j in range(_U(edge_lo), _U(edge_hi)):
                            cf[d + j] = zero


@njit(_IM2COL_SIG, nogil=True, cache=True, error_model="numpy")
def _im2col_unit_stride(x, col, kh_n, kw_n, sh, sw, pt, pl, dh, dw, first, last):
    """:func:`im2col` for column stride 1: each row is one contiguous copy (a "same"
    convolution's band: one copy per tap and channel, :func:`_im2col_shifted`).

    Taps are the outer loops and channels the inner one, so a tap's valid column span
    ``[lo, hi)`` is worked out once for all channels (no divisions in the loop).
    """
    c_n, h, wd = x.shape[0], x.shape[1], x.shape[2]
    ow_n = col.shape[2]
    if sh == 1 and dh == 1 and dw == 1 and ow_n == wd:
        _im2col_shifted(x, col, kh_n, kw_n, pt, pl, first, last)
        return
    pixels = col.shape[1] * ow_n
    xf, cf = x.reshape(-1), col.reshape(-1)
    for kh in range(kh_n):
        for kw in range(kw_n):
            off = kw * dw - pl
            lo = min(ow_n, max(0, -off))
            hi = max(lo, min(ow_n, wd - off))
            for c in range(c_n):
                row = ((c * kh_n + kh) * kw_n + kw) * pixels
                plane = c * h * wd + lo + off
                for oh in range(first, last):
                    d = row + oh * ow_n
                    ih = oh * sh - pt + kh * dh
                    inside = 0 <= ih < h
                    _zero_padding(cf, d, ow_n, lo, hi, inside)
                    if not inside:
                        continue
                    src, dst = _U(plane + ih * wd), _U(d + lo)
                    for i in range(_U(hi - lo)):
                        cf[dst + i] = xf[src + i]


@njit(_IM2COL_SIG, nogil=True, cache=True, error_model="numpy")
def im2col(x, col, kh_n, kw_n, sh, sw, pt, pl, dh, dw, first, last):
    """Output rows [first, last) of the im2col matrix of one image: ``col`` [C*KH*KW, OH, OW]
    gets ``x[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw]`` (zero on padding) at
    ``[(c*KH + kh)*KW + kw, oh, ow]``.

    Padding is written as zeros here, so no padded copy of the image is made; column
    stride 1 goes to :func:`_im2col_unit_stride`, stride 2 has a loop of its own (a
    constant stride vectorises).
    """
    if sw == 1:
        _im2col_unit_stride(x, col, kh_n, kw_n, sh, sw, pt, pl, dh, dw, first, last)
        return
    c_n, h, wd = x.shape[0], x.shape[1], x.shape[2]
    ow_n = col.shape[2]
    pixels = col.shape[1] * ow_n
    xf, cf = x.reshape(-1), col.reshape(-1)
    xa, ca = xf.ctypes.data, cf.ctypes.data
    for c in range(c_n):
        for kh in range(kh_n):
            for kw in range(kw_n):
                row = ((c * kh_n + kh) * kw_n + kw) * pixels
                off = kw * dw - pl
                lo = 0 if off >= 0 else min(ow_n, (-off + sw - 1) // sw)
                hi = max(lo, min(ow_n, (wd - 1 - off) // sw + 1)) if wd - 1 - off >= 0 else lo
                for oh in range(first, last):
                    d = row + oh * ow_n
                    ih = oh * sh - pt + kh * dh
                    inside = 0 <= ih < h
                    _zero_padding(cf, d, ow_n, lo, hi, inside)
                    if not inside:
                        continue
                    src, dst = _U(c * h * wd + ih * wd + lo * sw + off), _U(d + lo)
                    if sw == 2:  # shuffles: as a plain loop LLVM emitted gathers, 3x numpy's strided copy
                        take_evens(xf, xa, src, cf, ca, dst, _U(hi - lo))
                    else:
                        us = _U(sw)
                        for i in range(_U(hi - lo)):
                            cf[dst + i] = xf[src + i * us]
