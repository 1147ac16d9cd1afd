"""Winograd F(4x4, 3x3) input and output transforms, each one compiled pass.

Layouts (as the channel GEMMs want them): transformed input ``v[36, C, T]`` and GEMM result
``m[36, OC, T]``, tile index ``t = (image * th + ty) * tw + tx``. Between the two passes the
caller runs the 36 channel GEMMs ``m[k] = u[k] @ v[k]`` on BLAS.

Input pass, per (image, channel): the padded rows split by tile column phase into planes
of the channel's tiles, then B^T along the tiles' columns and along their rows, each a flat
loop over the tiles (:func:`winograd_input_planes` says how); or, where vectors hold 16
floats, in registers: a tile row at a time straight from the image rows
(:func:`winograd_input_rows`), or on small maps any 16 tiles with each of their 36 inputs one
masked gather (:func:`winograd_input_gathered`); :func:`winograd_input` picks.
Output pass, per output channel and group of tile rows: A^T over the six rows of ``m`` (a
contiguous run of tiles), A^T over columns, then bias and activation, written into the
output with the edge tiles cropped (:func:`winograd_output_planes`); or, where vectors hold 16
floats and tile rows are long enough, a tile row at a time in registers, each output row
interleaved by shuffles and stored whole (:func:`winograd_output_rows`). Matrices: Lavin &
Gray's, points 0, +-1, +-2, inf.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ..winograd import input_scratch_floats
from ._act import act
from ._act_ir import activate
from ._simd import _F32, _I32, _I64, allow_512_bit, broadcast, masked, split_quads, vector
from .activation import GELU, GELU_TANH
from ._types import f8, i8, ro, rw
from .vectors import host_full_width

_U = np.uint64

_IN = types.void(ro(4), rw(3), i8, i8, i8, i8, i8, i8, i8, i8, rw(1))
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


# The floats winograd_input needs: the plain formula callers size their scratch by, compiled in
# (the jit package's CACHE_SOURCES names its module, so an edit there recompiles).
_input_scratch = njit(inline="always")(input_scratch_floats)


@njit(_IN, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_input_planes(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch):
    """:func:`winograd_input` a channel plane at a time.

    ``scratch``: at least ``lowerkit.backend.cpu.winograd.input_scratch_floats(th, tw)``
    floats (else ValueError). Per channel plane:

    1. each padded input row ``4 ty + r`` (``r`` < 4) is split by tile column phase into
       ``q[r, p]``, a plane of the channel's tiles ``ty * tw + tx``: ``q[r, p][tile] =
       padded[4 ty + r, 4 tx + p]``, ``p`` 4 and 5 being the next tile's 0 and 1
       (``_simd.split_quads``, 8 tiles at a time, then one by one);
    2. ``h[r, b] = B^T`` along the six ``q[r, :]`` (a tile's columns), a flat loop over the
       channel's tile rows;
    3. ``v[6 a + b] = B^T`` along a tile's rows: rows ``4 ty + 0..3`` are ``h[0..3, b]`` at
       the tile, rows ``4 ty + 4, 5`` ``h[0, b]`` and ``h[1, b]`` a tile row on (``tw``
       further) — again a flat loop over the tiles.

    Every loop but the split runs over all of a channel's tiles, long enough to vectorise;
    the tile by tile form (B^T over rows, then each tile's six columns, 4 floats apart) left
    the second pass scalar. Flat unsigned indices: no per-row views, no negative-index checks.
    """
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    t_n = v.shape[2]
    xf, vf, sf = x.reshape(-1), v.reshape(-1), scratch.reshape(-1)
    if sf.shape[0] < _input_scratch(th, tw):
        raise ValueError("winograd_input: scratch smaller than input_scratch_floats(th, tw)")
    sa = sf.ctypes.data
    zero = np.float32(0)
    utw, four = _U(tw), _U(4)
    row_floats = _U(4 * tw + 8)  # one padded row, zeros past its end (what the splits read)
    spare = row_floats  # 16 floats the second split's unused phases go to
    plane = _U((th + 1) * tw)  # one phase plane: the tile rows and one more (rows 4 th + r)
    q0 = row_floats + _U(16)  # q[r, p] at q0 + (6 r + p) plane
    h0 = q0 + _U(24) * plane  # h[r, b] at h0 + (6 r + b) plane
    ct = _U(c_n * t_n)
    lo = max(0, pl)  # first padded column holding image data
    src0 = max(0, -pl)
    cnt = max(0, min(wd - src0, 4 * tw + 2 - lo))
    chunks = _U(tw // 8)
    for img in range(k):
        n = i0 + img
        for c in range(c0, c1):
            first = (n * c_n + c) * h * wd
            for ty in range(th + 1):  # 1. the phase planes
                for r in range(4):
                    ih = 4 * ty + r - pt
                    qr = q0 + _U(6 * r) * plane + _U(ty * tw)
                    if not 0 <= ih < h:
                        for p in range(_U(6)):
                            for j in range(utw):
                                sf[qr + p * plane + j] = zero
                        continue
                    for j in range(row_floats):
                        sf[j] = zero
                    src = _U(first + ih * wd + src0)
                    for j in range(_U(cnt)):
                        sf[_U(lo) + j] = xf[src + j]
                    for g in range(chunks):
                        d = qr + _U(8) * g
                        split_quads(sa + four * (_U(32) * g), sa + four * d, sa + four * (d + plane),
                                    sa + four * (d + _U(2) * plane), sa + four * (d + _U(3) * plane))
                        split_quads(sa + four * (_U(32) * g + four), sa + four * (d + _U(4) * plane),
                                    sa + four * (d + _U(5) * plane), sa + four * spare, sa + four * (spare + _U(8)))
                    for j in range(_U(8) * chunks, utw):
                        for p in range(_U(6)):
                            sf[qr + p * plane + j] = sf[four * j + p]
            for r in range(4):  # 2. B^T along each tile's columns
                qr = q0 + _U(6 * r) * plane
                hr = h0 + _U(6 * r) * plane
                for m in range(plane):
                    b0, b1, b2, b3, b4, b5 = _bt(sf[qr + m], sf[qr + plane + m], sf[qr + _U(2) * plane + m],
                                                 sf[qr + _U(3) * plane + m], sf[qr + four * plane + m],
                                                 sf[qr + _U(5) * plane + m])
                    sf[hr + m] = b0
                    sf[hr + plane + m] = b1
                    sf[hr + _U(2) * plane + m] = b2
                    sf[hr + _U(3) * plane + m] = b3
                    sf[hr + four * plane + m] = b4
                    sf[hr + _U(5) * plane + m] = b5
            t0 = _U(img * th * tw)
            p6 = _U(6) * plane
            for b in range(6):  # 3. B^T along each tile's rows, into v
                hb = h0 + _U(b) * plane
                o = _U((b * c_n + c) * t_n) + t0
                for t in range(_U(th * tw)):
                    a0, a1, a2, a3, a4, a5 = _bt(sf[hb + t], sf[hb + p6 + t], sf[hb + _U(2) * p6 + t],
                                                 sf[hb + _U(3) * p6 + t], sf[hb + utw + t], sf[hb + p6 + utw + t])
                    vf[o + t] = a0
                    vf[o + _U(6) * ct + t] = a1
                    vf[o + _U(12) * ct + t] = a2
                    vf[o + _U(18) * ct + t] = a3
                    vf[o + _U(24) * ct + t] = a4
                    vf[o + _U(30) * ct + t] = a5


# Where vectors hold 16 floats (VECTOR_FORMS) the input transform runs in registers, 16 tiles at a
# time: a tile row's, straight from its image rows (winograd_input_rows), or — on small maps,
# whose tile rows leave most lanes empty — any 16 consecutive tiles, their inputs gathered
# (winograd_input_gathered). The planes form splits each row into tile column phases through a
# scratch (a tile at a time below 8 tiles a row) and runs each pass over one channel's tiles.
# ``benchmarks/winograd_transforms.py`` times every form. One thread, µs, best of 30, planes /
# gathered / rows (Intel Xeon VM, a 16-float gather ~3 ns):
# images x channels x side 1x64x56 204 / 221 / 89, 1x64x112 807 / 948 / 649, 1x128x28 116 / 90
# / 72, 1x64x32 73 / 36 / 59, 1x256x14 156 / 56 / 121, 4x256x14 699 / 292 / 527, 4x512x7 599 /
# 110 / -; 1x32x224 1518 / - / 1547 (memory-bound: v is 14 MB). A gathered group of 16 tiles cost
# about two tile-row calls: winograd_input picks by that count. Team form, two threads, one
# image, planes / gathered: 128x28 78 / 45, 256x14 133 / 31, 512x7 87 / 40. Where 16-float vectors
# run at half width or not at all, neither was measured: the planes form stays.
VECTOR_FORMS = host_full_width()
GATHER_COST = 2  # a gathered group of 16 tiles against one tile row (16 tiles at most) of the rows form

_LANES = 16
_V16 = vector(_LANES)
_I32X16 = ir.VectorType(_I32, _LANES)
_I64X16 = ir.VectorType(_I64, _LANES)
_NOWHERE = -(1 << 30)  # a lane's row where it has no tile: every row test fails
_INDEXABLE = 1 << 31  # the gathers' element indices are int32: inputs of fewer floats
_CONTRACT = ("contract",)  # as the planes form's fastmath: LLVM may fuse a multiply and an add


def _first_lanes(builder, count):
    """The mask of lanes j < ``count`` (an i64)."""
    return builder.icmp_signed("<", ir.Constant(_I64X16, list(range(_LANES))), broadcast(builder, count, _LANES))


def _load(builder, at, mask):
    """The 16 floats at float pointer ``at``, lanes outside ``mask`` as zeros (and not read)."""
    return masked(builder, "load", _V16, [builder.bitcast(at, _V16.as_pointer()), ir.Constant(_I32, 4), mask,
                                          ir.Constant(_V16, [0.0] * _LANES)], _LANES)


def _store(builder, value, at, mask):
    """``value``'s lanes inside ``mask`` to the 16 floats at float pointer ``at``."""
    masked(builder, "store", ir.VoidType(), [value, builder.bitcast(at, _V16.as_pointer()), ir.Constant(_I32, 4), mask],
           _LANES)


def _shuffle(builder, a, b, indices):
    """Lanes ``indices`` of ``a`` and ``b`` side by side (0-15 from ``a``, 16-31 from ``b``)."""
    return builder.shuffle_vector(a, b, ir.Constant(_I32X16, indices))


class _Lanes:
    """Lane-wise arithmetic on 16-float vectors, each operation flagged ``contract`` (as the
    planes forms' fastmath: LLVM may fuse a multiply and an add), for the IR forms of
    :func:`_bt` and :func:`_at`."""

    def __init__(self, builder):
        self.builder = builder

    @staticmethod
    def c(value: float) -> ir.Constant:
        return ir.Constant(_V16, [float(value)] * _LANES)

    def add(self, a, b):
        return self.builder.fadd(a, b, flags=_CONTRACT)

    def sub(self, a, b):
        return self.builder.fsub(a, b, flags=_CONTRACT)

    def mul(self, a, b):
        return self.builder.fmul(a, b, flags=_CONTRACT)


def _bt_ir(builder, d):
    """B^T applied to six vectors (lane by lane), the same sums as :func:`_bt`."""
    f = _Lanes(builder)
    c, add, sub, mul = f.c, f.add, f.sub, f.mul
    d0, d1, d2, d3, d4, d5 = d
    return (add(sub(mul(c(4), d0), mul(c(5), d2)), d4),
            add(add(mul(c(-4), add(d1, d2)), d3), d4),
            add(sub(mul(c(4), sub(d1, d2)), d3), d4),
            add(sub(mul(c(2), sub(d3, d1)), d2), d4),
            add(sub(mul(c(2), sub(d1, d3)), d2), d4),
            add(sub(mul(c(4), d1), mul(c(5), d3)), d5))


def _store_transformed(builder, rows, v_a, stride, lanes):
    """The input transform's second half: B^T along each tile column's six values of ``rows``
    (``rows[r][b]``: B^T along input row r, column b), stored as ``v[6 a + b]`` at ``v_a +
    (6 a + b) * stride`` floats, lanes ``lanes`` (a mask) only."""
    vp = builder.inttoptr(v_a, _F32.as_pointer())
    for b in range(6):
        for a, value in enumerate(_bt_ir(builder, [rows[r][b] for r in range(6)])):
            _store(builder, value, builder.gep(vp, [builder.mul(ir.Constant(_I64, 6 * a + b), stride)]), lanes)


@intrinsic
def _gathered_tiles(typingctx, x, table, h, w, v, plane_stride, count):
    """B^T d B of 16 tiles of one channel, lane j the tile ``table`` describes in its lanes j:
    ``table`` (int32, 48: three vectors) holds each tile's first input element (floats from
    ``x``, the channel's plane of its image; any value where the tile starts in the padding),
    its first row and its first column (negative in the padding; a row of ``_NOWHERE`` for a
    lane without a tile). Each of the 36 input elements of the 16 tiles is one masked gather
    (elements outside the ``h`` x ``w`` image read as zeros); the 36 results go to ``v``,
    ``v + plane_stride``, ... (floats), lanes j < ``count`` only."""
    sig = types.void(types.uint64, types.uint64, types.int64, types.int64, types.uint64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        x_a, table_a, h_, w_, v_a, stride_, count_ = args
        allow_512_bit(builder)
        tp = builder.inttoptr(table_a, _I32X16.as_pointer())
        first, row0, col0 = (builder.load(builder.gep(tp, [ir.Constant(_I64, i)]), align=4) for i in range(3))
        lanes = _first_lanes(builder, count_)
        h32, w32 = (broadcast(builder, builder.trunc(a, _I32), _LANES) for a in (h_, w_))
        x_at = broadcast(builder, x_a, _LANES)
        pointers = ir.VectorType(_F32.as_pointer(), _LANES)
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_V16, [pointers, _I32, lanes.type, _V16]),
            f"llvm.masked.gather.v{_LANES}f32.v{_LANES}p0")
        zero = ir.Constant(_V16, [0.0] * _LANES)
        cols_inside = [builder.icmp_unsigned("<", builder.add(col0, ir.Constant(_I32X16, [p] * _LANES)), w32)
                       for p in range(6)]
        rows = []
        for r in range(6):  # B^T along each tile row's six columns
            row_inside = builder.icmp_unsigned("<", builder.add(row0, ir.Constant(_I32X16, [r] * _LANES)), h32)
            start = builder.add(first, builder.mul(ir.Constant(_I32X16, [r] * _LANES), w32))
            d = []
            for p in range(6):
                index = builder.sext(builder.add(start, ir.Constant(_I32X16, [p] * _LANES)), _I64X16)
                at = builder.add(x_at, builder.mul(index, ir.Constant(_I64X16, [4] * _LANES)))
                inside = builder.and_(row_inside, cols_inside[p])
                d.append(builder.call(gather, [builder.inttoptr(at, pointers), ir.Constant(_I32, 4), inside, zero]))
            rows.append(_bt_ir(builder, d))
        _store_transformed(builder, rows, v_a, stride_, lanes)
        return context.get_dummy_value()

    return sig, codegen


@njit(_IN, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_input_gathered(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch):
    """:func:`winograd_input` 16 tiles at a time (running on from one image into the next, as
    ``v``'s tiles do), each of a tile's 36 inputs one gather over the 16 — no copy of a row,
    no pass over one channel's few tiles; the same bits as :func:`winograd_input_planes`.
    ``scratch``: at least 48 floats (the tiles' table; ``input_scratch_floats`` gives more,
    else ValueError). Timings beside the module's ``VECTOR_FORMS``."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    t_n = v.shape[2]
    if scratch.shape[0] < 3 * _LANES:
        raise ValueError("winograd_input_gathered: scratch smaller than 48 floats")
    table = scratch[:3 * _LANES].view(np.int32)
    tiles = k * th * tw
    plane = th * tw
    ct = c_n * t_n
    xa, va = x.ctypes.data, v.ctypes.data
    for g in range(0, tiles, _LANES):
        count = min(_LANES, tiles - g)
        for j in range(_LANES):
            t = g + j
            if t < tiles:
                n, rem = t // plane, t % plane
                row, col = 4 * (rem // tw) - pt, 4 * (rem % tw) - pl
                table[j] = ((i0 + n) * c_n * h + row) * wd + col
                table[_LANES + j] = row
                table[2 * _LANES + j] = col
            else:
                table[j] = 0
                table[_LANES + j] = _NOWHERE
                table[2 * _LANES + j] = 0
        for c in range(c0, c1):
            _gathered_tiles(xa + np.uint64(4 * c * h * wd), table.ctypes.data, h, wd,
                            va + np.uint64(4 * (c * t_n + g)), ct, count)


_EVENS16 = list(range(0, 32, 2))
_ODDS16 = list(range(1, 32, 2))


@intrinsic
def _row_of_tiles(typingctx, x, h, w, row0, col0, count, v, plane_stride):
    """B^T d B of up to 16 consecutive tiles of one tile row of one channel, lane j the tile
    whose input starts at row ``row0`` and column ``col0 + 4 j`` of the ``h`` x ``w`` plane at
    ``x`` (negative or past the plane in the padding: zeros). Each of the six input rows is
    four 16-float loads (and one for its last two columns), masked to the plane, split by tile
    column phase in two rounds of even/odd shuffles; the 36 results go to ``v``, ``v +
    plane_stride``, ... (floats), lanes j < ``count`` only."""
    sig = types.void(types.uint64, types.int64, types.int64, types.int64, types.int64, types.int64, types.uint64,
                     types.int64)

    def codegen(context, builder, signature, args):
        x_a, h_, w_, row0_, col0_, count_, v_a, stride_ = args
        allow_512_bit(builder)
        lanes = _first_lanes(builder, count_)
        xp = builder.inttoptr(x_a, _F32.as_pointer())
        w64 = broadcast(builder, w_, _LANES)
        col0 = broadcast(builder, col0_, _LANES)
        columns = [ir.Constant(_I64X16, list(range(16 * q, 16 * q + 16))) for q in range(5)]  # of the five loads
        cols_inside = [builder.icmp_unsigned("<", builder.add(col0, c), w64) for c in columns]
        rows = []
        for r in range(6):  # B^T along each tile's six columns, one input row at a time
            row = builder.add(row0_, ir.Constant(_I64, r))
            row_inside = builder.icmp_unsigned("<", row, h_)
            start = builder.add(builder.mul(row, w_), col0_)
            row_lanes = broadcast(builder, row_inside, _LANES)
            a0, a1, a2, a3, a4 = (_load(builder, builder.gep(xp, [builder.add(start, ir.Constant(_I64, 16 * q))]),
                                        builder.and_(cols_inside[q], row_lanes)) for q in range(5))
            e1, o1 = _shuffle(builder, a0, a1, _EVENS16), _shuffle(builder, a0, a1, _ODDS16)
            e2, o2 = _shuffle(builder, a2, a3, _EVENS16), _shuffle(builder, a2, a3, _ODDS16)
            p0, p2 = _shuffle(builder, e1, e2, _EVENS16), _shuffle(builder, e1, e2, _ODDS16)
            p1, p3 = _shuffle(builder, o1, o2, _EVENS16), _shuffle(builder, o1, o2, _ODDS16)
            p4 = _shuffle(builder, p0, a4, list(range(1, 17)))  # the next tile's first two columns
            p5 = _shuffle(builder, p1, a4, list(range(1, 16)) + [17])
            rows.append(_bt_ir(builder, [p0, p1, p2, p3, p4, p5]))
        _store_transformed(builder, rows, v_a, stride_, lanes)
        return context.get_dummy_value()

    return sig, codegen


@njit(_IN, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_input_rows(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch):
    """:func:`winograd_input` a tile row (16 tiles at most) at a time, straight from the
    image rows: each input row's 66 columns under 16 tiles loaded as vectors (masked to the
    image: the padding reads as zeros) and split by tile column phase in registers — no copy,
    no scratch (``scratch`` unused); the same bits as :func:`winograd_input_planes`."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    t_n = v.shape[2]
    ct = c_n * t_n
    xa, va = x.ctypes.data, v.ctypes.data
    for img in range(k):
        n = i0 + img
        for c in range(c0, c1):
            plane = xa + np.uint64(4 * (n * c_n + c) * h * wd)
            for ty in range(th):
                for tx in range(0, tw, _LANES):
                    t = (img * th + ty) * tw + tx
                    _row_of_tiles(plane, h, wd, 4 * ty - pt, 4 * tx - pl, min(_LANES, tw - tx),
                                  va + np.uint64(4 * (c * t_n + t)), ct)


@njit(_IN, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_input(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch):
    """v[:, c, t] = B^T d B for images [i0, i0+k), channels [c0, c1); t counts from image i0.
    Where :data:`VECTOR_FORMS`: :func:`winograd_input_rows`, or :func:`winograd_input_gathered`
    where its groups of 16 tiles number under half the rows form's tile rows (small maps; and
    inputs of fewer than 2**31 floats); elsewhere :func:`winograd_input_planes` — the same bits
    every way. ``scratch``: at least ``lowerkit.backend.cpu.winograd.input_scratch_floats(th,
    tw)`` floats (else ValueError)."""
    if scratch.shape[0] < _input_scratch(th, tw):
        raise ValueError("winograd_input: scratch smaller than input_scratch_floats(th, tw)")
    if not VECTOR_FORMS:
        winograd_input_planes(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch)
    elif k * th * -(-tw // _LANES) < GATHER_COST * -(-(k * th * tw) // _LANES) or x.size >= _INDEXABLE:
        winograd_input_rows(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch)
    else:
        winograd_input_gathered(x, v, pt, pl, th, tw, i0, k, c0, c1, scratch)


@njit(inline="always", error_model="numpy")
def _at(m0, m1, m2, m3, m4, m5):
    """A^T applied to one 6-vector."""
    two, four, eight = np.float32(2), np.float32(4), np.float32(8)
    return (m0 + m1 + m2 + m3 + m4,
            m1 - m2 + two * (m3 - m4),
            m1 + m2 + four * (m3 + m4),
            m1 - m2 + eight * (m3 - m4) + m5)


@njit(_OUT, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_output_planes(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual):
    """:func:`winograd_output` in passes over groups of tile rows.

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


def _at_ir(builder, m):
    """A^T applied to six vectors (lane by lane), the same sums as :func:`_at`."""
    f = _Lanes(builder)
    c, add, sub, mul = f.c, f.add, f.sub, f.mul
    m0, m1, m2, m3, m4, m5 = m
    return (add(add(add(add(m0, m1), m2), m3), m4),
            add(sub(m1, m2), mul(c(2), sub(m3, m4))),
            add(add(m1, m2), mul(c(4), add(m3, m4))),
            add(add(sub(m1, m2), mul(c(8), sub(m3, m4))), m5))


_LOW = [i // 2 + (16 if i % 2 else 0) for i in range(16)]  # lanes 0-7 of a and b, alternating
_HIGH = [8 + i // 2 + (16 if i % 2 else 0) for i in range(16)]  # lanes 8-15


def _row_out_kernel(with_residual: bool):
    """One output channel's 4 x 4 outputs of up to 16 consecutive tiles of a tile row (see
    :func:`winograd_output_rows`); the ``with_residual`` variant adds the residual's same
    elements before the activation."""

    def codegen(context, builder, signature, args):
        m_a, m_stride, out_a, res_a, ld, rows_, cols_, bias_, code_, p0_, p1_, count_ = args
        allow_512_bit(builder)
        lanes = _first_lanes(builder, count_)
        mp = builder.inttoptr(m_a, _F32.as_pointer())

        def m_at(i):
            return _load(builder, builder.gep(mp, [builder.mul(ir.Constant(_I64, i), m_stride)]), lanes)

        columns = [_at_ir(builder, [m_at(6 * i + col) for i in range(6)]) for col in range(6)]  # [col][r]
        bias = broadcast(builder, bias_, _LANES)
        cols = broadcast(builder, cols_, _LANES)
        col_inside = [builder.icmp_signed("<", ir.Constant(_I64X16, [16 * q + j for j in range(_LANES)]), cols)
                      for q in range(4)]
        values, places, inside = [], [], []
        op, rp = builder.inttoptr(out_a, _F32.as_pointer()), builder.inttoptr(res_a, _F32.as_pointer())
        for r in range(4):  # output row r of the tiles: A^T over columns, then the columns interleaved
            y = [builder.fadd(v, bias, flags=_CONTRACT)
                 for v in _at_ir(builder, [columns[col][r] for col in range(6)])]  # y[c], lane = tile
            a_lo, a_hi = _shuffle(builder, y[0], y[2], _LOW), _shuffle(builder, y[0], y[2], _HIGH)
            b_lo, b_hi = _shuffle(builder, y[1], y[3], _LOW), _shuffle(builder, y[1], y[3], _HIGH)
            row_inside = broadcast(builder, builder.icmp_signed("<", ir.Constant(_I64, r), rows_), _LANES)
            for q, (a, b, idx) in enumerate(((a_lo, b_lo, _LOW), (a_lo, b_lo, _HIGH), (a_hi, b_hi, _LOW),
                                             (a_hi, b_hi, _HIGH))):
                values.append(_shuffle(builder, a, b, idx))
                places.append(builder.add(builder.mul(ir.Constant(_I64, r), ld), ir.Constant(_I64, 16 * q)))
                inside.append(builder.and_(row_inside, col_inside[q]))
        if with_residual:
            values = [builder.fadd(v, _load(builder, builder.gep(rp, [o]), ok), flags=_CONTRACT)
                      for v, o, ok in zip(values, places, inside)]
        for v, o, ok in zip(activate(builder, code_, p0_, p1_, values), places, inside):
            _store(builder, v, builder.gep(op, [o]), ok)
        return context.get_dummy_value()

    sig = types.void(types.uint64, types.int64, types.uint64, types.uint64, types.int64, types.int64, types.int64,
                     types.float32, types.int64, types.float64, types.float64, types.int64)

    @intrinsic
    def row_out(typingctx, m, m_stride, out, residual, ld, rows, cols, bias, code, p0, p1, count):
        return sig, codegen

    return row_out


# The output transform a tile row at a time (winograd_output_rows) on maps of at least this many
# tiles a row; on fewer, most of its lanes would be empty (``benchmarks/winograd_transforms.py``).
# One thread, µs, best of 30, planes / rows (Intel Xeon VM), ReLU: 1x64x112 717 / 479, 1x64x56 with a residual 200 / 129, 4x64x56
# with one 717 / 524, 1x128x28 73 / 48, 4x128x28 384 / 309; but 1x256x14 64 / 71, 4x256x14
# 274 / 372, 4x512x7 with a residual 195 / 379.
ROWS_OUTPUT_MIN_TILES = 7
_row_out = _row_out_kernel(False)
_row_out_plus = _row_out_kernel(True)


@njit(_OUT, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_output_rows(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual):
    """:func:`winograd_output` a tile row (16 tiles at most) of one output channel at a time:
    A^T m A of the tiles in registers (lane = tile), each output row's four columns
    interleaved by shuffles into contiguous vectors, then bias, residual and activation and
    one masked store per 16 outputs (the cropped ones left out) — no scratch (``s``, ``y``
    unused); the same bits as :func:`winograd_output_planes` (but ReLU's +0 for -0).
    Activations with an IR form only (``_act_ir.IR_CODES``: not the GELUs; ValueError)."""
    if code == GELU or code == GELU_TANH:
        raise ValueError("winograd_output_rows: the GELUs have no vector form here")
    oc_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    t_n = m.shape[2]
    has_bias = bias.shape[0] > 0
    has_residual = residual.size > 0
    ma, oa = m.ctypes.data, out.ctypes.data
    ra = residual.ctypes.data if has_residual else np.uint64(0)
    stride = m.shape[1] * t_n
    for oc in range(o0, o1):
        b = bias[oc] if has_bias else np.float32(0)
        for img in range(k):
            plane = np.uint64(4 * ((i0 + img) * oc_n + oc) * oh * ow)
            for ty in range(th):
                for tx in range(0, tw, _LANES):
                    t = (img * th + ty) * tw + tx
                    at = ma + np.uint64(4 * ((oc - o0) * t_n + t))
                    shift = plane + np.uint64(4 * (4 * ty * ow + 4 * tx))
                    rows, cols, count = oh - 4 * ty, ow - 4 * tx, min(_LANES, tw - tx)
                    if has_residual:
                        _row_out_plus(at, stride, oa + shift, ra + shift, ow, rows, cols, b, code, p0, p1, count)
                    else:
                        _row_out(at, stride, oa + shift, ra, ow, rows, cols, b, code, p0, p1, count)


@njit(_OUT, nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def winograd_output(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual):
    """out[i0:i0+k, o0:o1] = act(A^T m A + bias + residual), cropped; m's channel j is output
    channel o0 + j; ``residual`` is shaped like ``out`` (a fused residual add), or empty:
    :func:`winograd_output_rows` where :data:`VECTOR_FORMS`, a tile row has at least
    :data:`ROWS_OUTPUT_MIN_TILES` tiles and the activation has a vector form, else
    :func:`winograd_output_planes`. ``s`` [6, 4, n] and ``y`` [4, 4, n]: the planes form's
    scratch (``lowerkit.backend.cpu.winograd.output_group_tiles``)."""
    if VECTOR_FORMS and tw >= ROWS_OUTPUT_MIN_TILES and code != GELU and code != GELU_TANH:
        winograd_output_rows(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual)
    else:
        winograd_output_planes(m, bias, out, o0, o1, i0, k, th, tw, code, p0, p1, s, y, residual)
