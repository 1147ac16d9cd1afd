"""Winograd F(4x4, 3x3) input and output transforms, each one compiled pass per tile row.

Layouts (as the channel GEMMs want them): transformed input ``v[36, C, T]`` and GEMM result
``m[36, OC, T]``, tile index ``t = (image * th + ty) * tw + tx``. Between the two passes the
caller runs the 36 channel GEMMs ``m[k] = u[k] @ v[k]`` on BLAS.

Input pass, per (image, channel, tile row): the six input rows the tiles read are copied
zero-padded into ``rows[6, Wp]``, B^T combines them (vectorised over columns) into
``tmp[6, Wp]``, and B^T along each tile's six columns writes ``v`` (contiguous over tiles).
Output pass, per output channel and group of tile rows: A^T over the six rows of ``m`` (a
contiguous run of tiles), A^T over columns, then bias and activation, written into the
output with the edge tiles cropped. Matrices: Lavin & Gray's, points 0, +-1, +-2, inf.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._act import act
from ._types import f8, i8, ro, rw

_U = np.uint64

_IN = types.void(ro(4), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, rw(2), rw(2))
_OUT = types.void(ro(3), ro(1), rw(4), i8, i8, i8, i8, i8, i8, i8, f8, f8, rw(3), rw(3), ro(4))


@njit(inline="always", error_model="numpy")
def _bt(d0, d1, d2, d3, d4, d5):
    """B^T applied to one 6-vector."""
    four, five, two = np.float32(4), np.float32(5), np.float32(2)
    return (four * d0 - five * d2 + d4,
            -four * (d1 + d2) + d3 + d4,
            four * (d1 - d2) - d3 + d4,
            two * (d3 - d1) - d2 + d4,
            two * (d1 - d3) - d2 + d4,
            four * d1 - five * d3 + d5)


@njit(_IN, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_input(x, v, pt, pl, th, tw, i0, k, c0, c1, rows, tmp):
    """v[:, c, t] = B^T d B for images [i0, i0+k), channels [c0, c1); t counts from image i0.

    Flat unsigned indices in the loops: no per-row array views (each costs atomic
    reference counting) and no negative-index checks.
    """
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    t_n = v.shape[2]
    wp = 4 * tw + 2
    xf, vf, rf, tf = x.reshape(-1), v.reshape(-1), rows.reshape(-1), tmp.reshape(-1)
    zero = np.float32(0)
    uwp, ct = _U(wp), _U(c_n * t_n)
    lo = max(0, pl)  # first padded column holding image data
    src0 = max(0, -pl)
    cnt = max(0, min(wd - src0, wp - lo))
    for img in range(k):
        n = i0 + img
        for c in range(c0, c1):
            plane = (n * c_n + c) * h * wd
            for ty in range(th):
                for r in range(6):
                    base = _U(r * wp)
                    for j in range(uwp):
                        rf[base + j] = zero
                    ih = 4 * ty + r - pt
                    if 0 <= ih < h:
                        dst, src = _U(r * wp + lo), _U(plane + ih * wd + src0)
                        for j in range(_U(cnt)):
                            rf[dst + j] = xf[src + j]
                for j in range(uwp):
                    a0, a1, a2, a3, a4, a5 = _bt(rf[j], rf[uwp + j], rf[_U(2) * uwp + j], rf[_U(3) * uwp + j],
                                                 rf[_U(4) * uwp + j], rf[_U(5) * uwp + j])
                    tf[j] = a0
                    tf[uwp + j] = a1
                    tf[_U(2) * uwp + j] = a2
                    tf[_U(3) * uwp + j] = a3
                    tf[_U(4) * uwp + j] = a4
                    tf[_U(5) * uwp + j] = a5
                t0 = (img * th + ty) * tw
                for a in range(6):
                    ta = _U(a * wp)
                    o = _U((a * 6 * c_n + c) * t_n + t0)  # v[a*6 + 0, c, t0]
                    for tx in range(_U(tw)):
                        q = ta + _U(4) * tx
                        b0, b1, b2, b3, b4, b5 = _bt(tf[q], tf[q + _U(1)], tf[q + _U(2)], tf[q + _U(3)],
                                                     tf[q + _U(4)], tf[q + _U(5)])
                        vf[o + tx] = b0
                        vf[o + ct + tx] = b1
                        vf[o + _U(2) * ct + tx] = b2
                        vf[o + _U(3) * ct + tx] = b3
                        vf[o + _U(4) * ct + tx] = b4
                        vf[o + _U(5) * ct + tx] = b5


@njit(inline="always", error_model="numpy")
def _at(m0, m1, m2, m3, m4, m5):
    """A^T applied to one 6-vector."""
    two, four, eight = np.float32(2), np.float32(4), np.float32(8)
    return (m0 + m1 + m2 + m3 + m4,
            m1 - m2 + two * (m3 - m4),
            m1 + m2 + four * (m3 + m4),
            m1 - m2 + eight * (m3 - m4) + m5)


@njit(_OUT, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_output(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual):
    """out[i0:i0+k, o0:o1] = act(A^T m A + bias + residual), cropped; m's channel j is output
    channel o0 + j; ``residual`` is shaped like ``out`` (a fused residual add), or empty.

    ``s`` [6, 4, n] and ``y`` [4, 4, n] are this band's scratch, ``n >= tw`` tiles
    (``lowerkit.backend.cpu.winograd.output_group_tiles``): both A^T passes run over ``n //
    tw`` tile rows at a time — of one image or running on into the next, as ``m``'s tiles do —
    so their loops are long enough to vectorise (one tile row is 2-14 tiles on the zoo's
    maps). Flat unsigned indices.
    """
    oc_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    ob_n, t_n = m.shape[1], m.shape[2]
    cap = s.shape[2]
    group = max(1, cap // tw)  # tile rows a pass runs over
    mf, sf, yf, of, rf = m.reshape(-1), s.reshape(-1), y.reshape(-1), out.reshape(-1), residual.reshape(-1)
    has_bias = bias.shape[0] > 0
    has_residual = rf.shape[0] > 0
    ucap = _U(cap)
    u4 = _U(4) * ucap
    sk = _U(ob_n * t_n)  # between m[k] and m[k + 1]
    full = ow_n // 4  # tiles whose four columns are all inside the output
    rows_n = k * th  # tile rows of the k images, in m's order
    for oc in range(o0, o1):
        j = oc - o0
        b = bias[oc] if has_bias else np.float32(0)
        for r0 in range(0, rows_n, group):
            rg = min(group, rows_n - r0)
            nt = _U(rg * tw)
            base = j * t_n + r0 * tw
            for col in range(6):  # A^T over the six tile rows, for tile column ``col``
                q = _U(col * ob_n * t_n + base)
                d = _U(col) * u4
                for t in range(nt):
                    g0, g1, g2, g3 = _at(mf[q + t], mf[q + _U(6) * sk + t], mf[q + _U(12) * sk + t],
                                         mf[q + _U(18) * sk + t], mf[q + _U(24) * sk + t], mf[q + _U(30) * sk + t])
                    sf[d + t] = g0
                    sf[d + ucap + t] = g1
                    sf[d + _U(2) * ucap + t] = g2
                    sf[d + _U(3) * ucap + t] = g3
            for r in range(4):  # A^T over columns: output row r of each tile, plus the bias
                e = _U(r) * ucap
                f = _U(r) * u4
                for t in range(nt):
                    h0, h1, h2, h3 = _at(sf[e + t], sf[u4 + e + t], sf[_U(2) * u4 + e + t], sf[_U(3) * u4 + e + t],
                                         sf[_U(4) * u4 + e + t], sf[_U(5) * u4 + e + t])
                    yf[f + t] = h0 + b
                    yf[f + ucap + t] = h1 + b
                    yf[f + _U(2) * ucap + t] = h2 + b
                    yf[f + _U(3) * ucap + t] = h3 + b
            for i in range(rg):  # into the output, edge tiles cropped: y[r, c, tile] is (4 ty + r, 4 tx + c)
                n, ty = i0 + (r0 + i) // th, (r0 + i) % th
                for r in range(min(4, oh_n - 4 * ty)):
                    row = _U(((n * oc_n + oc) * oh_n + 4 * ty + r) * ow_n)
                    src = _U(r) * u4 + _U(i * tw)
                    if has_residual:
                        for tx in range(_U(full)):
                            o = row + _U(4) * tx
                            of[o] = act(yf[src + tx] + rf[o], code, p0, p1)
                            of[o + _U(1)] = act(yf[src + ucap + tx] + rf[o + _U(1)], code, p0, p1)
                            of[o + _U(2)] = act(yf[src + _U(2) * ucap + tx] + rf[o + _U(2)], code, p0, p1)
                            of[o + _U(3)] = act(yf[src + _U(3) * ucap + tx] + rf[o + _U(3)], code, p0, p1)
                    else:
                        for tx in range(_U(full)):
                            o = row + _U(4) * tx
                            of[o] = act(yf[src + tx], code, p0, p1)
                            of[o + _U(1)] = act(yf[src + ucap + tx], code, p0, p1)
                            of[o + _U(2)] = act(yf[src + _U(2) * ucap + tx], code, p0, p1)
                            of[o + _U(3)] = act(yf[src + _U(3) * ucap + tx], code, p0, p1)
                    for c in range(ow_n - 4 * full):  # the last tile's columns inside the output
                        o = row + _U(4 * full + c)
                        value = yf[src + _U(c) * ucap + _U(full)]
                        if has_residual:
                            value += rf[o]
                        of[o] = act(value, code, p0, p1)
