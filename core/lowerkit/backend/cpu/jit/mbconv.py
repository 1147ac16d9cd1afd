"""An inverted-residual block — a 1x1 expansion, a depthwise convolution, a 1x1 projection
(MobileNetV2's, with or without its residual add) — band by band of output rows, so that the
expanded tensor and the depthwise output never leave the cache.

Run layer by layer, each of the three writes its whole output before the next reads it: on
MobileNetV2's 56x56 and 112x112 maps the expanded tensor (1.8 and 4.8 MB an image) is written
out to memory and read back twice. Here each band of ``band`` output rows:

1. expands the input rows the band's depthwise rows read (the panel GEMM, ``.panel._gemm_at``,
   on the columns of those rows) into a band buffer — only the rows the band before did not
   already hold (those move to the buffer's top);
2. runs the depthwise convolution on those rows (``.dwrows._plane``, which takes any range of
   output rows, on the band buffer's planes as if they were the image's);
3. projects the band's depthwise output into its columns of the block's output (the panel
   GEMM again), adding the residual where there is one.

The band buffers (:func:`scratch_floats`) are reused band after band, so their lines stay in
cache. A team region splits the output rows between the threads, each with its own buffers:
each reads only its own rows (and a halo of input rows) and writes its own columns of the
output — no layer's output crosses between the cores.

Where it runs: 3x3 depthwise layers at stride 1 or 2 that the row kernel takes (vectors of 16
floats, ``.dwrows``), with activations that run in registers (``.dwrows.ir_code``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ._types import f8, i8, ro, rw
from .dwrows import ir_code, plane3x3, row_masks, rows_scratch
from .panel import ROWS as PANEL_ROWS
from .panel import STRIP_FLOATS, _gemm_at

KERNEL = 3  # the depthwise kernel size the block takes


def band_input_rows(band: int, stride: int, kernel: int = KERNEL) -> int:
    """Input rows the depthwise convolution reads for ``band`` output rows."""
    return (band - 1) * stride + kernel


def scratch_floats(expanded: int, in_w: int, out_w: int, band: int, stride: int) -> int:
    """Floats of scratch one thread needs for a block of ``expanded`` channels between maps
    ``in_w`` and ``out_w`` wide, ``band`` output rows at a time: the two band buffers, the
    depthwise kernel's zero row and masks, and the panel GEMM's strips."""
    return (expanded * band_input_rows(band, stride) * in_w + expanded * band * out_w
            + rows_scratch((0, in_w), (0, out_w), KERNEL, stride) + STRIP_FLOATS)


@njit(nogil=True, cache=True, error_model="numpy")
def rows(x, pe, be, nce, wd, bd, pp, bp, ncp, out, residual, scratch, stride, pt, pl, h, w, ow, ce, e0, e1, cd, d0,
         d1, cp, q0, q1, band, y_first, y_last):
    """Output rows [y_first, y_last) of one image: ``x`` [Cin, H*W], ``out`` and ``residual``
    (or empty) [Cout, OH*OW]; ``pe``/``be`` and ``pp``/``bp`` the packed 1x1 weights and their
    biases (``panels.PackedWeight``), ``nce``/``ncp`` their column blocks; ``wd`` [Cexp, 1, 3,
    3], ``bd`` [Cexp] (empty: none); activation codes and parameters per layer; ``scratch`` of
    :func:`scratch_floats`."""
    cin, cexp, cout = x.shape[0], wd.shape[0], out.shape[0]
    k = wd.shape[2]
    cap_in, cap_out = (band - 1) * stride + k, band
    size_in, size_out = cexp * cap_in * w, cexp * cap_out * ow
    e2 = scratch[:size_in].reshape(cexp, cap_in * w)
    d2 = scratch[size_in:size_in + size_out].reshape(cexp, cap_out * ow)
    dw_scratch = scratch[size_in + size_out:]
    masks = row_masks(dw_scratch, w, ow, k, stride, pl)
    strips = dw_scratch[w + masks.shape[0]:]
    count_e, count_p = -(-cexp // PANEL_ROWS), -(-cout // PANEL_ROWS)
    none = np.empty((0, 0), np.float32)
    u4 = np.uint64(4)
    ea, da, wa = np.uint64(e2.ctypes.data), np.uint64(d2.ctypes.data), np.uint64(wd.ctypes.data)
    za, ma = np.uint64(dw_scratch.ctypes.data), np.uint64(masks.ctypes.data)
    has_bias = bd.shape[0] > 0
    key = k * 4 + stride
    have0, have1 = 0, 0  # input rows [have0, have1) in the band buffer
    for y0 in range(y_first, y_last, band):
        y1 = min(y_last, y0 + band)
        r0, r1 = max(0, y0 * stride - pt), min(h, (y1 - 1) * stride - pt + k)
        keep = 0
        if have0 <= r0 < have1:  # rows the band before expanded: to the buffer's top
            keep = have1 - r0
            shift = (r0 - have0) * w
            if shift > 0:
                for c in range(cexp):
                    row = e2[c]
                    for i in range(keep * w):
                        row[i] = row[shift + i]
        if r1 > r0 + keep:  # input column (r * w + i) lands in buffer column ((r - r0) * w + i)
            _gemm_at(pe, be, x, e2, strips, cin, cexp, nce, ce, e0, e1, 0, count_e, (r0 + keep) * w, r1 * w,
                     -r0 * w, none)
        have0, have1 = r0, r1
        for c in range(cexp):
            # the plane's row 0 as if the buffer held the whole image (only rows r0.. are read)
            src = ea + u4 * np.uint64(c * cap_in * w) - u4 * np.uint64(r0 * w)
            dst = da + u4 * np.uint64(c * cap_out * ow) - u4 * np.uint64(y0 * ow)
            b = np.float64(bd[c]) if has_bias else 0.0
            plane3x3(key, src, dst, wa + u4 * np.uint64(c * k * k), b, za, ma, h, w, y0, y1, ow, pt, pl, cd, d0, d1)
        _gemm_at(pp, bp, d2, out, strips, cexp, cout, ncp, cp, q0, q1, 0, count_p, 0, (y1 - y0) * ow, y0 * ow,
                 residual)


_SIG = types.void(ro(3), ro(1), ro(1), i8, ro(4), ro(1), ro(1), ro(1), i8, rw(3), ro(3), rw(1), i8, i8, i8, i8,
                  i8, i8, f8, f8, i8, f8, f8, i8, f8, f8, i8)


@njit(_SIG, nogil=True, cache=True, error_model="numpy")
def mbconv(x, pe, be, nce, wd, bd, pp, bp, ncp, out, residual, scratch, stride, pt, pl, w, ow, ce, e0, e1, cd, d0,
           d1, cp, q0, q1, band):
    """The block on every image on this thread: ``x`` [N, Cin, H*W], ``out`` [N, Cout, OH*OW]
    and ``residual`` of its shape (or empty), output rows ``band`` at a time, ``scratch`` of
    :func:`scratch_floats`; the other arguments as :func:`rows` takes them (``cd`` a code that
    runs in registers, else ``ValueError``)."""
    if not ir_code(cd):
        raise ValueError("mbconv: the depthwise activation must run in registers")
    h, oh = x.shape[2] // w, out.shape[2] // ow
    for i in range(x.shape[0]):
        added = residual[i] if residual.size > 0 else residual.reshape(0, 0)
        rows(x[i], pe, be, nce, wd, bd, pp, bp, ncp, out[i], added, scratch, stride, pt, pl, h, w, ow, ce, e0, e1,
              cd, d0, d1, cp, q0, q1, band, 0, oh)
