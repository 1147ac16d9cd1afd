"""Winograd F(4x4, 3x3) input and output transforms, each one compiled pass per tile row.

Layouts (as the channel GEMMs want them): transformed input ``v[36, C, T]`` and GEMM result
``m[36, OC, T]``, tile index ``t = (image * th + ty) * tw + tx``. Between the two passes the
caller runs the 36 channel GEMMs ``m[k] = u[k] @ v[k]`` on BLAS.

Input pass, per (image, channel, tile row): the six input rows the tiles read are copied
zero-padded into ``rows[6, Wp]``, B^T combines them (vectorised over columns) into
``tmp[6, Wp]``, and B^T along each tile's six columns writes ``v`` (contiguous over tiles).
Output pass, per (output channel, image, tile row): A^T over the six rows of ``m`` (a
contiguous run of tiles), A^T over columns, then bias and activation, written into the
output with the edge tiles cropped. Matrices: Lavin & Gray's, points 0, +-1, +-2, inf.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._act import act
from ._types import f8, i8, ro, rw

_IN = types.void(ro(4), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, rw(2), rw(2))
_OUT = types.void(ro(3), ro(1), rw(4), i8, i8, i8, i8, i8, i8, i8, f8, f8, rw(3), rw(3))


@njit(inline="always")
def _bt(d0, d1, d2, d3, d4, d5):
    """B^T applied to one 6-vector."""
    four, five, two = np.float32(4), np.float32(5), np.float32(2)
    return (four * d0 - five * d2 + d4,
            -four * (d1 + d2) + d3 + d4,
            four * (d1 - d2) - d3 + d4,
            two * (d3 - d1) - d2 + d4,
            two * (d1 - d3) - d2 + d4,
            four * d1 - five * d3 + d5)


@njit(_IN, nogil=True, cache=True)
def winograd_input(x, v, pt, pl, th, tw, i0, k, c0, c1, rows, tmp):
    """v[:, c, t] = B^T d B for images [i0, i0+k), channels [c0, c1); t counts from image i0."""
    h, wd = x.shape[2], x.shape[3]
    wp = 4 * tw + 2
    zero = np.float32(0)
    for img in range(k):
        n = i0 + img
        for c in range(c0, c1):
            plane = x[n, c]
            for ty in range(th):
                for r in range(6):
                    dst = rows[r]
                    for j in range(wp):
                        dst[j] = zero
                    ih = 4 * ty + r - pt
                    if 0 <= ih < h:
                        lo = max(0, pl)  # first padded column holding image data
                        src0 = max(0, -pl)
                        cnt = min(wd - src0, wp - lo)
                        if cnt > 0:
                            seg = dst[lo:lo + cnt]
                            src = plane[ih, src0:src0 + cnt]
                            for j in range(cnt):
                                seg[j] = src[j]
                r0, r1, r2, r3, r4, r5 = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
                t0, t1, t2, t3, t4, t5 = tmp[0], tmp[1], tmp[2], tmp[3], tmp[4], tmp[5]
                for j in range(wp):
                    a0, a1, a2, a3, a4, a5 = _bt(r0[j], r1[j], r2[j], r3[j], r4[j], r5[j])
                    t0[j], t1[j], t2[j], t3[j], t4[j], t5[j] = a0, a1, a2, a3, a4, a5
                base = (img * th + ty) * tw
                for a in range(6):
                    ta = tmp[a]
                    o0 = v[a * 6 + 0, c, base:base + tw]
                    o1 = v[a * 6 + 1, c, base:base + tw]
                    o2 = v[a * 6 + 2, c, base:base + tw]
                    o3 = v[a * 6 + 3, c, base:base + tw]
                    o4 = v[a * 6 + 4, c, base:base + tw]
                    o5 = v[a * 6 + 5, c, base:base + tw]
                    for tx in range(tw):
                        b0, b1, b2, b3, b4, b5 = _bt(ta[4 * tx], ta[4 * tx + 1], ta[4 * tx + 2],
                                                     ta[4 * tx + 3], ta[4 * tx + 4], ta[4 * tx + 5])
                        o0[tx], o1[tx], o2[tx], o3[tx], o4[tx], o5[tx] = b0, b1, b2, b3, b4, b5


@njit(inline="always")
def _at(m0, m1, m2, m3, m4, m5):
    """A^T applied to one 6-vector."""
    two, four, eight = np.float32(2), np.float32(4), np.float32(8)
    return (m0 + m1 + m2 + m3 + m4,
            m1 - m2 + two * (m3 - m4),
            m1 + m2 + four * (m3 + m4),
            m1 - m2 + eight * (m3 - m4) + m5)


@njit(_OUT, nogil=True, cache=True)
def winograd_output(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y):
    """out[i0:i0+k, o0:o1] = act(A^T m A + bias), cropped; m's channel j is output channel o0 + j.

    ``s`` [6, 4, tw] and ``y`` [4, 4, tw] are this band's scratch.
    """
    oh_n, ow_n = out.shape[2], out.shape[3]
    has_bias = bias.shape[0] > 0
    for oc in range(o0, o1):
        j = oc - o0
        b = bias[oc] if has_bias else np.float32(0)
        for img in range(k):
            n = i0 + img
            for ty in range(th):
                base = (img * th + ty) * tw
                for col in range(6):  # A^T over the six tile rows, for tile column ``col``
                    q0 = m[0 * 6 + col, j, base:base + tw]
                    q1 = m[1 * 6 + col, j, base:base + tw]
                    q2 = m[2 * 6 + col, j, base:base + tw]
                    q3 = m[3 * 6 + col, j, base:base + tw]
                    q4 = m[4 * 6 + col, j, base:base + tw]
                    q5 = m[5 * 6 + col, j, base:base + tw]
                    sc = s[col]
                    for tx in range(tw):
                        sc[0, tx], sc[1, tx], sc[2, tx], sc[3, tx] = _at(q0[tx], q1[tx], q2[tx], q3[tx],
                                                                         q4[tx], q5[tx])
                for r in range(4):  # A^T over columns: output row r of each tile
                    g0, g1, g2, g3, g4, g5 = s[0, r], s[1, r], s[2, r], s[3, r], s[4, r], s[5, r]
                    yr = y[r]
                    for tx in range(tw):
                        yr[0, tx], yr[1, tx], yr[2, tx], yr[3, tx] = _at(g0[tx], g1[tx], g2[tx], g3[tx],
                                                                         g4[tx], g5[tx])
                rows = min(4, oh_n - 4 * ty)
                for r in range(rows):
                    dst = out[n, oc, 4 * ty + r]
                    for c in range(4):
                        yc = y[r, c]
                        full = (ow_n - c + 3) // 4  # tiles whose column c lies inside the output
                        cnt = min(tw, full)
                        for tx in range(cnt):
                            dst[4 * tx + c] = act(yc[tx] + b, code, p0, p1)
