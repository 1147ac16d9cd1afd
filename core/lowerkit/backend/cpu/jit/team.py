"""Team kernels: one numba ``parallel=True`` region per call, one band per thread, for a
single image on several cores (see :mod:`.layer` for why OpenMP, and when these may run).

Each kernel cuts its work into ``ways`` contiguous bands and runs the serial kernel of
:mod:`.conv` (or :mod:`.winograd`) on each band in a ``prange``; every plane or channel is
computed by the same code as in the serial kernel, so results equal it bit for bit (the
GEMM bands equal BLAS's result on those rows or columns).

- :func:`gemm_bias_activation` — ``out = act(w @ x + bias)``: each thread multiplies a band
  of output rows with :func:`.cblas.sgemm` (MKL's or numpy's ``cblas_sgemm``; BLAS must be at one
  thread) and runs the epilogue on its band while it is in that core's cache;
- :func:`depthwise3x3_same`, :func:`depthwise3x3_s2`, :func:`depthwise_blocked`, :func:`depthwise_rows`,
  :func:`conv2d_grouped`, :func:`depthwise_channels_last` — bands of planes (or channels);
- :func:`im2col` — one image's columns in bands of channels (of output rows for fewer channels than ways);
- :func:`conv_tiles` — a convolution as implicit GEMM: bands of output rows, im2col and GEMM
  a few rows at a time, in each thread's cache;
- :func:`fc_bias_activation` — a fully-connected layer in bands of output columns;
- :func:`attention` — scaled dot-product attention in equal bands of the heads' query rows
  (a band may end inside a head): each head's rows' scores (``cblas_sgemm``), row softmax
  (:func:`.norm.softmax_rows`) and weighted sum (``cblas_sgemm``) on one thread, the scores in
  that core's cache; :func:`packed_attention` the same on the
  heads as one fully-connected layer packs them (q, k and v read where they lie, the output
  written in its tokens' rows);
- :func:`max_pool3x3` — the 3x3 max pool in bands of planes;
- :func:`layer_norm` — :func:`.norm.layer_norm_rows` in bands of rows;
- :func:`winograd_input` (bands of input channels) and :func:`winograd_products_output`
  (bands of output channels: the band's 36 channel GEMMs, then its output transform), or
  :func:`winograd_panels_output` (the same on the packed transformed weight, the GEMMs by
  :func:`.panel.tuple_gemms`, in bands of its panels);
- :func:`pin_workers` — no work: each team thread but the caller's pins itself to a CPU
  (``lowerkit.backend.cpu.team.pin_team_workers`` says why).

The GEMM kernels exist only where :func:`.cblas.sgemm` found a BLAS (else it is None): its
signature carries that function's C prototype.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
from numba import njit, prange, types
from numba.core.typing.ctypes_utils import make_function_type

from . import conv, mbconv, norm, panel, pool, winograd
from .cblas import NO_TRANS, ROW_MAJOR, TRANS, sgemm
from .layer import team_ready
from ._act import act_span
from ._types import f8, i8, ro, rw

# Compiling or loading a parallel=True function starts numba's threading layer: choose it
# (OpenMP first, see .layer) before any kernel below exists, whoever imports this module first.
team_ready()

_FLAGS = dict(nogil=True, cache=True, parallel=True, error_model="numpy")


@njit(inline="always")
def _band(total, j, ways):
    return total * j // ways, total * (j + 1) // ways


@njit(inline="always")
def _columns_epilogue(of, bias, rows, n, c0, c1, code, p0, p1):
    """Bias and activation of columns [c0, c1) of every row of a flat [rows, n] output (a
    band of pixels, not contiguous, so row by row; ``bias`` [rows] or empty)."""
    has_bias = bias.shape[0] > 0
    for r in range(rows):
        lo, hi = r * n + c0, r * n + c1
        if has_bias:
            b = bias[r]
            for i in range(lo, hi):
                of[i] += b
        act_span(of, lo, hi, code, p0, p1)


@njit(types.void(ro(4), ro(4), ro(1), rw(4), rw(1), i8, f8, f8, i8), **_FLAGS)
def depthwise3x3_same(x, w, bias, out, means, code, p0, p1, ways):
    """:func:`.conv.depthwise3x3_same` on ``ways`` bands of planes."""
    planes = out.shape[0] * out.shape[1]
    for j in prange(ways):
        first, last = _band(planes, j, ways)
        conv.depthwise3x3_same(x, w, bias, out, means, code, p0, p1, first, last)


@njit(types.void(ro(4), ro(4), ro(1), rw(2), rw(4), rw(1), i8, f8, f8, i8), **_FLAGS)
def depthwise3x3_s2(x, w, bias, phases, out, means, code, p0, p1, ways):
    """:func:`.conv.depthwise3x3_s2` on ``ways`` bands of planes; ``phases`` [ways, 4*OH*OW]
    holds each thread's phase scratch."""
    planes = out.shape[0] * out.shape[1]
    for j in prange(ways):
        first, last = _band(planes, j, ways)
        conv.depthwise3x3_s2(x, w, bias, phases[j], out, means, code, p0, p1, first, last)


_TABLE = types.Array(types.uint64, 1, "C", readonly=True)


@njit(types.void(ro(4), ro(4), ro(1), ro(3), _TABLE, rw(2), rw(4), rw(1), i8, i8, i8, i8, f8, f8, i8), **_FLAGS)
def depthwise_blocked(x, w, bias, blocks, table, scratch, out, means, stride, pt, pl, code, p0, p1, ways):
    """:func:`.dwblock.depthwise_blocked` on ``ways`` bands of planes, cut at whole blocks of 8
    when the channels are a multiple of 8 (else a block across a cut runs as two partial
    ones; the pool's bands are cut the same way, ``team_layers.plane_cuts``); ``scratch``
    [ways, floats] holds each thread's buffers."""
    planes = out.shape[0] * out.shape[1]
    aligned = out.shape[1] % 8 == 0
    for j in prange(ways):
        first, last = _band(planes // 8 if aligned else planes, j, ways)
        if aligned:
            first, last = first * 8, last * 8
        conv.depthwise_blocked(x, w, bias, blocks, table, scratch[j], out, means, stride, pt, pl, code, p0, p1, first,
                               last)


@njit(types.void(ro(4), ro(4), ro(1), rw(2), rw(4), rw(1), i8, i8, i8, i8, f8, f8, i8), **_FLAGS)
def depthwise_rows(x, w, bias, scratch, out, means, stride, pt, pl, code, p0, p1, ways):
    """:func:`.dwrows.depthwise_rows` on ``ways`` bands of planes; ``scratch`` [ways, floats]
    holds each thread's zero row and masks."""
    planes = out.shape[0] * out.shape[1]
    for j in prange(ways):
        first, last = _band(planes, j, ways)
        conv.depthwise_rows(x, w, bias, scratch[j], out, means, stride, pt, pl, code, p0, p1, first, last)


@njit(types.void(ro(2), ro(1), ro(1), i8, ro(4), ro(1), ro(1), ro(1), i8, rw(2), ro(2), rw(2), i8, i8, i8, i8,
                 i8, i8, f8, f8, i8, f8, f8, i8, f8, f8, i8, i8), **_FLAGS)
def mbconv_rows(x, pe, be, nce, wd, bd, pp, bp, ncp, out, residual, scratch, stride, pt, pl, w, ow, ce, e0, e1, cd,
                d0, d1, cp, q0, q1, band, ways):
    """:func:`.mbconv.mbconv` of one image (``x`` [Cin, H*W], ``out`` and ``residual`` — or
    empty — [Cout, OH*OW]): thread j takes its share of the bands of output rows, with
    ``scratch[j]`` (each thread reads its rows and a halo of input rows, and writes only its
    own columns of the output)."""
    if not mbconv.ir_code(cd):
        raise ValueError("mbconv_rows: the depthwise activation must run in registers")
    h, oh = x.shape[1] // w, out.shape[1] // ow
    bands = -(-oh // band)
    for j in prange(ways):
        y0, y1 = band * (bands * j // ways), min(oh, band * (bands * (j + 1) // ways))
        if y1 > y0:
            mbconv.rows(x, pe, be, nce, wd, bd, pp, bp, ncp, out, residual, scratch[j], stride, pt, pl, h, w, ow, ce,
                        e0, e1, cd, d0, d1, cp, q0, q1, band, y0, y1)


@njit(types.void(ro(4), ro(4), ro(1), rw(4), i8, i8, i8, i8, i8, i8, i8, i8, f8, f8, i8), **_FLAGS)
def conv2d_grouped(x, w, bias, out, sh, sw, pt, pl, dh, dw, groups, code, p0, p1, ways):
    """:func:`.conv.conv2d_grouped` on ``ways`` bands of planes."""
    planes = out.shape[0] * out.shape[1]
    for j in prange(ways):
        first, last = _band(planes, j, ways)
        conv.conv2d_grouped(x, w, bias, out, sh, sw, pt, pl, dh, dw, groups, code, p0, p1, first, last)


@njit(types.void(ro(4), ro(2), ro(1), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, i8, f8, f8, i8), **_FLAGS)
def depthwise_channels_last(xp, wt, bias, acc, oh, ow, kh, kw, sh, sw, dh, dw, code, p0, p1, ways):
    """:func:`.conv.depthwise_channels_last` on ``ways`` bands of channels."""
    channels = xp.shape[3]
    for j in prange(ways):
        c0, c1 = _band(channels, j, ways)
        conv.depthwise_channels_last(xp, wt, bias, acc, oh, ow, kh, kw, sh, sw, dh, dw, code, p0, p1, c0, c1)


@njit(types.void(ro(4), rw(4), i8, i8, i8, i8), **_FLAGS)
def max_pool3x3(x, out, stride, pt, pl, ways):
    """:func:`.pool.max_pool3x3` on ``ways`` bands of planes."""
    planes = x.shape[0] * x.shape[1]
    for j in prange(ways):
        first, last = _band(planes, j, ways)
        pool.max_pool3x3(x, out, stride, pt, pl, first, last)


@njit(types.void(ro(2), ro(1), ro(1), rw(2), f8, i8), **_FLAGS)
def layer_norm(x, weight, bias, out, eps, ways):
    """:func:`.norm.layer_norm_rows` on ``ways`` bands of rows."""
    for j in prange(ways):
        first, last = _band(x.shape[0], j, ways)
        norm.layer_norm_rows(x, weight, bias, out, eps, first, last)


@njit(types.void(ro(3), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, i8), **_FLAGS)
def im2col(x, col, kh, kw, sh, sw, pt, pl, dh, dw, ways):
    """:func:`.conv.im2col` of one image on ``ways`` bands of channels (each thread writes one
    contiguous block of ``col``), or of output rows when there are fewer channels than ways."""
    channels, rows = x.shape[0], col.shape[1]
    taps = kh * kw
    by_channels = channels >= ways
    for j in prange(ways):
        if by_channels:
            c0, c1 = _band(channels, j, ways)
            conv.im2col(x[c0:c1], col[c0 * taps:c1 * taps], kh, kw, sh, sw, pt, pl, dh, dw, 0, rows)
        else:
            first, last = _band(rows, j, ways)
            conv.im2col(x, col, kh, kw, sh, sw, pt, pl, dh, dw, first, last)


def _gemm_bias_activation(w, x, bias, out, code, p0, p1, ways, by_columns, gemm):
    """``out = act(w @ x + bias)`` (``w`` [M, K], ``x`` [K, N], ``out`` [M, N], all C order;
    ``bias`` [M] or empty) in ``ways`` bands of output rows, or of columns with
    ``by_columns``: each band multiplied by ``gemm`` (cblas_sgemm, row-major) and finished
    by the epilogue on the same thread, while it is in that core's cache."""
    m, k = w.shape
    n = x.shape[1]
    has_bias = bias.shape[0] > 0
    of = out.reshape(-1)
    one, zero = np.float32(1.0), np.float32(0.0)
    for j in prange(ways):
        if by_columns:
            c0, c1 = _band(n, j, ways)
            if c1 > c0:
                gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, c1 - c0, k, one, w.ctypes.data, k,
                     x.ctypes.data + np.uint64(4 * c0), n, zero, out.ctypes.data + np.uint64(4 * c0), n)
                _columns_epilogue(of, bias, m, n, c0, c1, code, p0, p1)
        else:
            r0, r1 = _band(m, j, ways)
            if r1 > r0:
                gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, r1 - r0, n, k, one, w.ctypes.data + np.uint64(4 * r0 * k), k,
                     x.ctypes.data, n, zero, out.ctypes.data + np.uint64(4 * r0 * n), n)
                conv.bias_activation(out[r0:r1], bias[r0:r1] if has_bias else bias, code, p0, p1)


@njit(types.void(ro(4), rw(3), i8, i8, i8, i8, i8, i8, rw(2), i8), **_FLAGS)
def winograd_input(x, v, pt, pl, th, tw, i0, k, scratch, ways):
    """:func:`.winograd.winograd_input` on ``ways`` bands of input channels; ``scratch``
    [ways, input_scratch_floats] holds each thread's."""
    channels = x.shape[1]
    for j in prange(ways):
        c0, c1 = _band(channels, j, ways)
        if c1 > c0:
            winograd.winograd_input(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch[j])


@njit(types.void(ro(1), ro(1), ro(3), ro(1), rw(4), rw(4), rw(4), rw(4), i8, i8, i8, i8, i8, f8, f8, i8, i8, ro(4)),
      **_FLAGS)
def winograd_panels_output(panels, zeros, v, bias, out, m, s, y, i0, k, th, tw, code, p0, p1, ways, nc, residual):
    """:func:`winograd_products_output` on the packed ``U`` (``panels.PackedTuples``): per
    band of panels (6 output channels each), the band's channel GEMMs by
    :func:`.panel.tuple_gemms`, then its output transform on the same thread. ``m`` [ways, 36,
    rows, T] (rows at least 6 x the most panels a band takes)."""
    oc, c = out.shape[1], v.shape[1]
    count = -(-oc // panel.ROWS)
    cols = k * th * tw
    for j in prange(ways):
        q0, q1 = _band(count, j, ways)
        if q1 > q0:
            panel.tuple_gemms(panels, zeros, v, m[j], c, oc, nc, q0, q1, cols)
            winograd.winograd_output(m[j], bias, out, q0 * panel.ROWS, min(oc, q1 * panel.ROWS), i0, k, th, tw, code,
                                     p0, p1, s[j], y[j], residual)


def _winograd_products_output(u, v, bias, out, m, s, y, i0, k, th, tw, code, p0, p1, ways, gemm, residual):
    """Per band of output channels: the band's 36 channel GEMMs ``m[j][a] = u[a][band] @ v[a]``
    (``gemm``, cblas_sgemm), then :func:`.winograd.winograd_output` of the band on the same
    thread (with ``residual``, shaped like ``out`` or empty). ``m`` [ways, 36, rows, T] (rows
    at least the largest band), ``s`` and ``y`` are each thread's buffers."""
    oc, c = u.shape[1], u.shape[2]
    t = v.shape[2]
    cols = k * th * tw  # the chunk's images' columns: a partial last chunk leaves the rest unwritten
    rows = m.shape[2]
    for j in prange(ways):
        o0, o1 = _band(oc, j, ways)
        if o1 > o0:
            mj = m[j]
            for a in range(36):
                gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, o1 - o0, cols, c, np.float32(1.0),
                     u.ctypes.data + np.uint64(4 * (a * oc + o0) * c), c, v.ctypes.data + np.uint64(4 * a * c * t), t,
                     np.float32(0.0), mj.ctypes.data + np.uint64(4 * a * rows * t), t)
            winograd.winograd_output(mj, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s[j], y[j], residual)


def _conv_tiles(x, w, bias, out, kh, kw, sh, sw, pt, pl, dh, dw, tile_rows, cols, code, p0, p1, ways, gemm):
    """One image's convolution as implicit GEMM in tiles: ``out`` [OC, OH, OW] = act(``w``
    [OC, K] @ columns + bias), each thread taking a band of output rows and, ``tile_rows``
    rows at a time, filling the tile's columns with :func:`.conv.im2col` into its own
    ``cols[j]`` (at least K * tile_rows * OW floats) and multiplying them while they are in
    its cache; the epilogue runs on the tile. No column matrix for the whole image."""
    oc, k = w.shape
    oh, ow = out.shape[1], out.shape[2]
    n = oh * ow
    of = out.reshape(-1)
    for j in prange(ways):
        r0, r1 = _band(oh, j, ways)
        col = cols[j]
        for a in range(r0, r1, tile_rows):
            rows = min(tile_rows, r1 - a)
            tile = col[:k * rows * ow].reshape(k, rows, ow)
            conv.im2col(x, tile, kh, kw, sh, sw, pt - a * sh, pl, dh, dw, 0, rows)
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, oc, rows * ow, k, np.float32(1.0), w.ctypes.data, k,
                 tile.ctypes.data, rows * ow, np.float32(0.0), out.ctypes.data + np.uint64(4 * a * ow), n)
            _columns_epilogue(of, bias, oc, n, a * ow, (a + rows) * ow, code, p0, p1)


def _fc_bias_activation(x, w, bias, out, code, p0, p1, ways, gemm):
    """``out = act(x @ w + bias)`` (``x`` [M, K], ``w`` [K, N], ``out`` [M, N], C order;
    ``bias`` [N] or empty — a fully-connected layer, M the batch) in ``ways`` bands of
    output columns: each thread reads only its columns of the weight."""
    m, k = x.shape
    n = w.shape[1]
    has_bias = bias.shape[0] > 0
    of = out.reshape(-1)
    for j in prange(ways):
        c0, c1 = _band(n, j, ways)
        if c1 > c0:
            gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, c1 - c0, k, np.float32(1.0), x.ctypes.data, k,
                 w.ctypes.data + np.uint64(4 * c0), n, np.float32(0.0), out.ctypes.data + np.uint64(4 * c0), n)
            for r in range(m):
                base = r * n
                if has_bias:
                    for i in range(c0, c1):
                        of[base + i] += bias[i]
                act_span(of, base + c0, base + c1, code, p0, p1)


# attention's phases: scores only (a mask is added between two regions), the softmax and weighted
# sum only, or all of it
SCORES, WEIGHTED_SUM, WHOLE = 0, 1, 2


def _attention(q, k, v, out, scores, weights, scale, phase, ways, gemm):
    """Scaled dot-product attention over ``H`` heads (batch and heads flattened; C order):
    ``scores[h] = scale * q[h] @ k[h]^T`` (``q`` [H, L, E], ``k`` [H, S, E]), ``weights[h]`` its
    row softmax, ``out[h] = weights[h] @ v[h]`` (``v`` [H, S, F], ``out`` [H, L, F]) — in ``ways``
    equal bands of the heads' query rows (:func:`_row_span`); ``phase`` (:data:`SCORES`,
    :data:`WEIGHTED_SUM`, :data:`WHOLE`) runs the first product only, the rest only, or all."""
    heads, length, depth = q.shape
    source, width = k.shape[1], v.shape[2]
    alpha, one, zero = np.float32(scale), np.float32(1.0), np.float32(0.0)
    for j in prange(ways):
        s0, s1 = _band(heads * length, j, ways)
        for h in range(s0 // length, -(-s1 // length)):
            r0, r1 = _row_span(s0, s1, h, length)
            if r1 > r0:
                rows = r1 - r0
                if phase != WEIGHTED_SUM:
                    gemm(ROW_MAJOR, NO_TRANS, TRANS, rows, source, depth, alpha,
                         q[h].ctypes.data + np.uint64(4 * r0 * depth), depth, k[h].ctypes.data, depth, zero,
                         scores[h].ctypes.data + np.uint64(4 * r0 * source), source)
                if phase != SCORES:
                    norm.softmax_rows(scores[h], weights[h], False, r0, r1)
                    gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, width, source, one,
                         weights[h].ctypes.data + np.uint64(4 * r0 * source), source, v[h].ctypes.data, width, zero,
                         out[h].ctypes.data + np.uint64(4 * r0 * width), width)


@njit(inline="always")
def _row_span(s0, s1, g, length):
    """Rows ``(r0, r1)`` of group ``g`` (``length`` rows each) in the band [s0, s1) of all the
    groups' rows, flattened (empty where they do not meet)."""
    return max(s0 - g * length, 0), min(s1 - g * length, length)


def _packed_attention(qkv, out, scores, weights, scale, phase, heads, ways, gemm):
    """:func:`_attention` on a transformer's packed projections: ``qkv`` [B * L, 3 * H * E]
    (each token's q, k and v, each [H, E]: a fully-connected layer's output), ``out``
    [B * L, H * E] (each token's heads side by side), ``scores`` and ``weights``
    [B * H, L, L]. Each head's operands are read in place (rows ``3 * H * E`` floats apart)
    and its output written in place: no copies into [B, H, L, E] and back. The threads take
    equal bands of the query rows of all the heads, not whole heads: DeiT-Tiny's three heads
    on two threads had left one thread a third of the work."""
    groups, length = scores.shape[0], scores.shape[1]
    width = out.shape[1]
    depth = width // heads
    row = qkv.shape[1]
    alpha, one, zero = np.float32(scale), np.float32(1.0), np.float32(0.0)
    for j in prange(ways):
        s0, s1 = _band(groups * length, j, ways)
        for g in range(s0 // length, -(-s1 // length)):
            r0, r1 = _row_span(s0, s1, g, length)
            if r1 > r0:
                image, head = g // heads, g % heads
                q = qkv.ctypes.data + np.uint64(4 * (image * length * row + head * depth))
                k, v = q + np.uint64(4 * width), q + np.uint64(8 * width)
                if phase != WEIGHTED_SUM:
                    gemm(ROW_MAJOR, NO_TRANS, TRANS, r1 - r0, length, depth, alpha, q + np.uint64(4 * r0 * row), row,
                         k, row, zero, scores[g].ctypes.data + np.uint64(4 * r0 * length), length)
                if phase != SCORES:
                    norm.softmax_rows(scores[g], weights[g], False, r0, r1)
                    gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, r1 - r0, depth, length, one,
                         weights[g].ctypes.data + np.uint64(4 * r0 * length), length, v, row, zero,
                         out.ctypes.data + np.uint64(4 * ((image * length + r0) * width + head * depth)), width)


def _pin_workers(masks, setaffinity):
    """Every thread of the region with a team index ``t`` >= 1 pins itself to the CPUs of
    ``masks[t]`` (a ``cpu_set_t`` as 64-bit words) through ``setaffinity`` (libc's
    ``sched_setaffinity``; pid 0 is the calling thread); the caller's thread (index 0) is left
    alone. Returns how many threads pinned themselves."""
    pinned = 0
    for _ in prange(masks.shape[0]):
        t = numba.get_thread_id()
        if 0 < t < masks.shape[0] and setaffinity(0, masks.shape[1] * 8, masks[t].ctypes.data) == 0:
            pinned += 1
    return pinned


def _sched_setaffinity():
    """libc's ``sched_setaffinity`` as a ctypes function, or None where there is none (not Linux)."""
    try:
        function = ctypes.CDLL(None).sched_setaffinity
    except (AttributeError, OSError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    return function


SCHED_SETAFFINITY = _sched_setaffinity()
pin_workers = None
if SCHED_SETAFFINITY is not None:
    _PIN_SIG = types.int64(types.Array(types.uint64, 2, "C", readonly=True), make_function_type(SCHED_SETAFFINITY))
    pin_workers = njit(_PIN_SIG, **_FLAGS)(_pin_workers)

_SGEMM = sgemm()
gemm_bias_activation = fc_bias_activation = winograd_products_output = conv_tiles = attention = None
packed_attention = None
if _SGEMM is not None:
    _GEMM_SIG = types.void(ro(2), ro(2), ro(1), rw(2), i8, f8, f8, i8, types.boolean, make_function_type(_SGEMM.function))
    gemm_bias_activation = njit(_GEMM_SIG, **_FLAGS)(_gemm_bias_activation)
    _FC_SIG = types.void(ro(2), ro(2), ro(1), rw(2), i8, f8, f8, i8, make_function_type(_SGEMM.function))
    fc_bias_activation = njit(_FC_SIG, **_FLAGS)(_fc_bias_activation)
    _WINO_SIG = types.void(ro(3), ro(3), ro(1), rw(4), rw(4), rw(4), rw(4), i8, i8, i8, i8, i8, f8, f8, i8,
                           make_function_type(_SGEMM.function), ro(4))
    winograd_products_output = njit(_WINO_SIG, **_FLAGS)(_winograd_products_output)
    _TILES_SIG = types.void(ro(3), ro(2), ro(1), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, i8, rw(2), i8, f8, f8, i8,
                            make_function_type(_SGEMM.function))
    conv_tiles = njit(_TILES_SIG, **_FLAGS)(_conv_tiles)
    _ATTENTION_SIG = types.void(ro(3), ro(3), ro(3), rw(3), rw(3), rw(3), f8, i8, i8, make_function_type(_SGEMM.function))
    attention = njit(_ATTENTION_SIG, **_FLAGS)(_attention)
    _PACKED_SIG = types.void(ro(2), rw(2), rw(3), rw(3), f8, i8, i8, i8, make_function_type(_SGEMM.function))
    packed_attention = njit(_PACKED_SIG, **_FLAGS)(_packed_attention)
