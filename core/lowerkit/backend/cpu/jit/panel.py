"""A GEMM on weights packed once into panels, with the convolution epilogue fused:
``out = act(w @ x + bias)`` for a 1x1 convolution's weight ``w`` [M, K] and an image ``x``
[K, N] (or a convolution's im2col columns).

BLAS's ``sgemm`` packs both operands on every call. For a pointwise layer of a mobile network
that is the cost that matters: the weight is small and the same every call, and with few
output channels (MobileNetV2's 96x16 at 112x112) or few input channels the packing of the
image is a large part of the work, then the epilogue reads the whole output back. Here the
weight is packed at bind time (``lowerkit.backend.cpu.panels.PackedWeight``) in panels of 6
rows, ``panel[k, r] = w[6p + r, k]``. The image is multiplied a block of ``nc`` columns
(``panels.block_columns``) at a time by every panel where it lies; it is read in place, or —
with the 6 x 16 tile, for a call over at least ``PACK_PANELS`` panels and ``PACK_INPUTS``
rows, where the copy is cheap against the reads it saves — each 256-row block of it is first
copied into 16-column strips, so a tile reads one contiguous 64-byte line per step (one
thread, new / in place: 512x4608x49 1.10, 1024x256x196 1.08, 960x160x49 1.02; two threads
2048x512x49 1.14, 960x160x49 1.20; with fewer panels the copy lost up to 20%). The
micro-kernels are LLVM IR (through numba intrinsics, so every register is explicit): a tile
of 6 rows x 16 columns in twelve 8-float accumulators — or, where the CPU has AVX-512VL's 32
vector registers (``TILE``), of 6 x 32 in 24; where it also runs 512-bit vectors at full
width, in 16-float vectors (``LANES``), with a 6 x 64 tile in 24 —, ``fmuladd`` per step (one FMA instruction
where the CPU has FMA), started from the bias, with a prefetch of the panel ``PREFETCH``
floats ahead (or of the block the next panel's tiles read); the
activation runs on the accumulators before they are stored (``_act_ir``; the GELUs, which
have no IR form, on the tile's rows while they are in L1).
The last, partial tile of a block is the same tile with its image and output accesses masked
(``llvm.masked.load``/``store``: ``vmaskmovps`` on AVX) — 6 x 16 for 9-15 columns, 6 x 8 for
4-8 — or, for 1-3 columns, a 6 x 1 kernel per column (the panel as one vector, cheaper than a
masked tile of mostly empty lanes); a single column after whole tiles (49 = 3 x 16 + 1, every
7x7 map) rides on the last tile instead, as a 13th accumulator; a remainder under 16 columns
joins the last block rather than cost a pass over every panel of its own.

Kernels:

- :func:`gemm` — panels [pa, pb) x columns [n0, n1) on the calling thread;
- :func:`gemm_images` — every image of a batch on the calling thread, in one call;
  :func:`gated_gemm_images` — the same with the weight's columns scaled by each image's gate;
- :func:`conv_tiles` — an im2col convolution (a stem) in row tiles on the calling thread;
- :func:`tuple_gemms` — Winograd's 36 channel GEMMs on its packed transformed weight, a band
  of panels on the calling thread;
- :func:`team_gemm` — one team region (see :mod:`.layer`), bands of columns or of panels;
  :func:`team_gated_gemm` — the same with the weight's columns scaled by a gate;
- :func:`fc_rows` — a fully-connected layer of a few rows, the weight packed in bands
  (:func:`pack_bands`, ``panels.PackedBands``); :func:`team_fc_rows` — the same as one team
  region (a model's one-row classifier at batch 1); :func:`fc` — the same tile over row
  panels, for any number of rows (transformers' tokens); :func:`team_fc` — its team region.
"""

from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ._act import act_span
from ._act_ir import IR_CODES, activate
from .conv import im2col
from ._simd import _F32, _I32, _I64, _V8, allow_512_bit, broadcast, fmuladd, vector  # LLVM types and builders
from ._simd import const as _const, masked as _masked
from ._types import f8, i8, ro, rw
from .layer import team_ready
from .vectors import host_full_width

team_ready()  # team_gemm is a parallel region: choose the threading layer first

ROWS = 6  # output channels of a panel (of a tile)
PAD = 8  # floats the packed weight and bias keep after their end (room for 8-float loads)
K_BLOCK = 256  # inner-dimension block: a tile's panel slice stays in L1
PACK_PANELS = 32  # copy the image into strips when a call covers this many panels ...
PACK_INPUTS = 64  # ... and rows (the copy then costs little against the reads it saves)


def _compiled_for_host() -> bool:
    """Whether numba compiles for this machine's CPU (not for another, or a generic, one)."""
    from numba.core import config

    return config.CPU_NAME in (None, "host")


def _wide_register_file() -> bool:
    """Whether numba compiles for this CPU and it has AVX-512VL: 32 vector registers for 8-float
    vectors too (AVX2 has 16), room for the 6 x 32 tile's 24 accumulators."""
    if not _compiled_for_host():
        return False
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512vl", False))


# Columns of the main tile: 6 x 32 (24 accumulators) where the CPU has the registers, else 6 x
# 16 (12). Per step the wide tile loads four image vectors and six weights for 24 FMAs instead of
# two and six for 12. One thread, hot data, GFLOP/s 6 x 16 / 6 x 32 (Zen 4 VM): 64x256x3072
# 72 / 101, 512x256x768 80-97 / 101-111, 128x1152x768 92 / 105, 256x1024x192 100-104 / 107-110.
TILE = 32 if _wide_register_file() else 16
# The 6 x 16 tile reads the image faster from 16-column strips (see the module docstring) on calls
# over many panels; the wide tile reads it in place at full speed (the same shapes, strips / in
# place: 256x1024x196 87 / 107, 512x256x784 100 / 111, 512x2048x49 97 / 107), so it never copies.
PACKS = TILE == 16
# Image rows a multiple of this many bytes apart fall in the same cache sets (4 KB: an L1 way;
# the L2's ways are multiples of it), so a block of a power-of-two-wide map read in place
# keeps few of its rows cached between one panel and the next: 128x256 over a 128x128 map, two
# threads, panel / sgemm 0.43, and 1.12 at 1088 columns. Such an image is copied into strips
# where a call covers ALIASING_PANELS panels: in strips / in place over 4096 and 16384 columns,
# K 64 and 256 (AMD EPYC Zen 3 VM, ``benchmarks/panel.py``): 1.2-2.1 from 4 panels (24 rows),
# 0.97 at 3 and 0.73 at 2, where the copy is read too few times to pay.
ALIASING_BYTES = 4096
ALIASING_PANELS = 4
STRIP_FLOATS = K_BLOCK * (128 + 16)  # a thread's scratch for the copy: a block of up to 143 columns
# Each step of a tile prefetches the panel this many floats (128 steps, 3 KB) ahead. A layer's
# weight is read from L3 or memory by its first tile only (the others find it in L1), at 24
# bytes a step, a stream the hardware prefetchers evidently do not run far enough ahead of. Paired
# handles on a Zen 4 VM, with / without: glow_like at batch 1 ResNet-18 0.93, EfficientNet-B0
# 0.96, MobileNetV2 0.95-0.98, ResNet-50 0.96-0.97 (384 floats ahead 0.96-0.98, 96 0.97-0.99).
# Where the inner dimension takes several blocks, a tile prefetches the next panel's block
# instead (``_ahead``).
PREFETCH = 768
_PREFETCH_BYTES = np.uint64(4 * PREFETCH)  # a tile's ``ahead``: its panel PREFETCH floats on

_NONE = np.uint64(0)  # a tile's residual address: none


_U64 = types.uint64
# k, panel, x, ldx, c, ldc, bias, first, rows, activation code, p0, p1, residual (the address of
# the tile's first element in an array shaped like ``c``, added before the activation; 0: none)
# (, the edge tile's columns), and last the address of the panel rows to prefetch (``ahead``)
_TILE_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, i8, f8, f8, _U64, _U64)
_EDGE_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, i8, f8, f8, _U64, i8, _U64)
# ... and, for the tile with one more column, that column's image address and row stride
_PLUS_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, i8, f8, f8, _U64, _U64, i8, _U64)
# ... the rows_in_place tiles: the panel's rows' stride last
_FC_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, i8, f8, f8, _U64, i8)
_FC_EDGE_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, i8, f8, f8, _U64, i8, i8)
# k, panel, x, ldx, c, ldc, bias, first, rows, residual
_COLUMN_SIG = types.void(i8, _U64, _U64, i8, _U64, i8, _U64, types.boolean, i8, _U64)


def _prefetch(builder, ptr):
    """``llvm.prefetch`` of the line at ``ptr`` for reading, into every cache level (on x86
    ``prefetcht0``; never faults, so it may run past the end of an array)."""
    i8p = ir.IntType(8).as_pointer()
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]),
                                        "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _plus_residual(builder, res_a, final, load_vector, load_extra, vectors: int):
    """``final`` (the tile's accumulators, rows x vectors, then the extra column's lanes if
    ``load_extra``) plus the residual tile where its address ``res_a`` is not 0: a branch
    around the loads, so a tile without one reads nothing more."""
    before = builder.block
    add, joined = builder.append_basic_block("tile.residual"), builder.append_basic_block("tile.joined")
    builder.cbranch(builder.icmp_unsigned("!=", res_a, _const(0)), add, joined)
    builder.position_at_end(add)
    added = [builder.fadd(final[r * vectors + v], load_vector(r, v)) for r in range(ROWS) for v in range(vectors)]
    if load_extra is not None:  # lane r: row r of the extra column (lanes 6 and 7 unused)
        column = ir.Constant(_V8, [0.0] * 8)
        for r in range(ROWS):
            column = builder.insert_element(column, load_extra(r), ir.Constant(_I32, r))
        added.append(builder.fadd(final[-1], column))
    builder.branch(joined)
    builder.position_at_end(joined)
    return _merged(builder, (final, before), (added, add))


def _merged(builder, *arms):
    """Where control flow joins: one phi per value position over ``arms``, pairs of (the
    values, the block they come from)."""
    merged = []
    for values in zip(*(values for values, _ in arms)):
        phi = builder.phi(values[0].type)
        for value, (_, block) in zip(values, arms):
            phi.add_incoming(value, block)
        merged.append(phi)
    return merged


def _close_loop(builder, idx, acc, new, end, before, loop, done):
    """The back edge of a micro-kernel's loop over k: the index and the accumulators' phis take
    this step's values (``new``), the loop repeats while the next index is below ``end``;
    returns the accumulators after it, where ``before`` is (the block before the loop, the
    starting values) — those where the loop ran no step."""
    nxt = builder.add(idx, _const(1))
    idx.add_incoming(nxt, builder.block)
    for phi, value in zip(acc, new):
        phi.add_incoming(value, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, end), loop, done)
    builder.position_at_end(done)
    pre, start = before
    return _merged(builder, (start, pre), (new, loop))


def _tile_kernel(vectors: int, edge: bool, gather: bool = False, plus_one: bool = False, stream: int = 0,
                 lanes: int = 8, rows_in_place: bool = False, next_columns: int = 0):
    """The 6 x (``lanes`` * ``vectors``) micro-kernel, in vectors of ``lanes`` floats (8, or 16 in
    zmm registers): ``c[r, :] = (first ? bias[r] : c[r, :]) +
    sum over k of panel[k, r] * x[k, :]`` for rows r < ``rows``. Addresses as integers,
    strides in floats. Each step prefetches the 6 weights at the same step from ``ahead``, the
    address every tile but ``rows_in_place`` takes last (``_ahead``: the panel rows read next).
    The ``edge`` variant takes the number of valid columns last and masks every image and
    output access past them (the last, partial tile of a row of columns).
    The ``gather`` variant takes, in place of ``ldx``, the address of an int64 table: row k
    of the image starts ``table[k]`` floats after ``x`` (:mod:`.direct`'s taps).
    The ``stream`` variant (``stream`` > 0) also prefetches the image that many rows ahead.
    The ``next_columns`` variant (> 0) also prefetches, each step, the image row's tile as many
    columns on: the next block's, while this one is computed.
    The ``plus_one`` variant also computes the column right after the tile (output column
    ``lanes * vectors``), whose image column it takes last (its address and row stride): the
    panel's six weights of a step as one vector times that column's value, a 13th
    accumulator — a block's single last column (7x7 maps: 49 = 3 x 16 + 1) at the cost of one
    more load and FMA a step, where the one-column kernel after the tiles cost ~15% of the
    block.
    The ``rows_in_place`` variant (:func:`fc`'s tile, roles turned: six rows of a matrix as the
    panel, a band of the weight as the image) reads its panel as six rows where they lie, row
    r at ``panel + r * lda`` floats, ``lda`` taken last; and its ``bias`` is per column — one
    row of ``lanes * vectors`` floats every row starts from (masked on an edge). Copying the
    rows into a panel first had taken a fifth of a 3136x384 @ 384x96 product (0.64 of 3.32
    ms), and adding the bias onto a prefilled output read the output once more.
    Activation ``code`` (one of ``_act_ir.IR_CODES``, else none) with ``p0``, ``p1`` runs on the
    accumulators before they are stored, after the ``residual`` tile (a fused residual add)
    where its address is not 0 (the caller passes both with the last block of k)."""

    def codegen(context, builder, signature, args):
        kk, panel_a, x_a, ldx_, c_a, ldc_, bias_a, first_, rows_, code_, p0_, p1_, res_a = args[:13]
        vt = vector(lanes)
        fptr, vptr, v8ptr = _F32.as_pointer(), vt.as_pointer(), _V8.as_pointer()
        if lanes > 8:
            allow_512_bit(builder)
        w_p, x_p, c_p, b_p = (builder.inttoptr(a, fptr) for a in (panel_a, x_a, c_a, bias_a))
        res_p = builder.inttoptr(res_a, fptr)
        if plus_one:
            xe_p, lde_ = builder.inttoptr(args[13], fptr), args[14]
        lda_ = args[-1] if rows_in_place else None
        ahead_p = None if rows_in_place else builder.inttoptr(args[-1], fptr)
        masks = []
        if edge:  # lane i of vector v is valid when lanes * v + i < cols
            indices = ir.VectorType(_I64, lanes)
            wide = builder.insert_element(ir.Constant(indices, ir.Undefined), args[13], ir.Constant(_I32, 0))
            wide = builder.shuffle_vector(wide, ir.Constant(indices, ir.Undefined),
                                          ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))
            masks = [builder.icmp_signed("<", ir.Constant(indices, [lanes * v + i for i in range(lanes)]), wide)
                     for v in range(vectors)]
        zero = ir.Constant(vt, [0.0] * lanes)  # the masked loads' fill
        align = ir.Constant(_I32, 4)

        def load(ptr, v):
            if edge:
                return _masked(builder, "load", vt, [ptr, align, masks[v], zero], lanes)
            return builder.load(ptr, align=4)

        def store(value, ptr, v):
            if edge:
                _masked(builder, "store", ir.VoidType(), [value, ptr, align, masks[v]], lanes)
            else:
                builder.store(value, ptr, align=4)

        def row_ptr(r, base=c_p, stride=ldc_):  # rows past ``rows`` read row 0 (valid memory; never stored)
            valid = builder.icmp_signed("<", _const(r), rows_)
            return builder.gep(base, [builder.mul(builder.select(valid, _const(r), _const(0)), stride)])

        def vec_ptr(base, v):
            return builder.bitcast(builder.gep(base, [_const(lanes * v)]), vptr)

        if rows_in_place:  # the bias of the tile's columns, the same for every row
            column_bias = [load(vec_ptr(b_p, v), v) for v in range(vectors)]
            from_bias = [column_bias[v] for _ in range(ROWS) for v in range(vectors)]
        else:
            from_bias = [broadcast(builder, builder.load(builder.gep(b_p, [_const(r)])), lanes)
                         for r in range(ROWS) for _ in range(vectors)]
        if plus_one:  # lane r: row r of the extra column (lanes 6 and 7 unused, never stored)
            from_bias.append(builder.load(builder.bitcast(b_p, v8ptr), align=4))
        # The tile starts from the bias on the first block of k, else from the output so far: read
        # only then (a load under a select would read a tile that is then overwritten — from
        # memory, on a large map's first visit: a stall at every tile's start).
        entry = builder.block
        with builder.if_then(builder.not_(first_), likely=False):
            from_c = [load(vec_ptr(row_ptr(r), v), v) for r in range(ROWS) for v in range(vectors)]
            if plus_one:
                column_c = ir.Constant(_V8, ir.Undefined)
                for r in range(ROWS):
                    value = builder.load(builder.gep(row_ptr(r), [_const(lanes * vectors)]))
                    column_c = builder.insert_element(column_c, value, ir.Constant(_I32, r))
                from_c.append(column_c)
            loaded = builder.block
        start = _merged(builder, (from_bias, entry), (from_c, loaded))
        # The residual tile is added after the loop: its rows (6 streams, often from L3 or
        # memory) are fetched now, while the loop runs (without, a 1x1 layer's fused add lost
        # to the separate pass on 56x56 maps: ResNet-50's conv3, 6.9 against 4.3 + 0.6 ms).
        ahead = builder.select(builder.icmp_unsigned("!=", res_a, _const(0)), res_p, c_p)
        for r in range(ROWS):
            for offset in sorted({*range(0, lanes * vectors + plus_one, 16), lanes * vectors - 1 + plus_one}):
                _prefetch(builder, builder.gep(row_ptr(r, ahead), [_const(offset)]))
        if rows_in_place:  # each row's start (rows past ``rows`` read row 0: valid memory)
            a_rows = [row_ptr(r, w_p, lda_) for r in range(ROWS)]
        pre = builder.block
        loop, done = builder.append_basic_block("tile.loop"), builder.append_basic_block("tile.done")
        builder.cbranch(builder.icmp_signed(">", kk, _const(0)), loop, done)
        builder.position_at_end(loop)
        idx = builder.phi(_I64)
        idx.add_incoming(_const(0), pre)
        acc = []
        for s in start:
            phi = builder.phi(s.type)
            phi.add_incoming(s, pre)
            acc.append(phi)
        if gather:
            table = builder.inttoptr(ldx_, _I64.as_pointer())
            x_row = builder.gep(x_p, [builder.load(builder.gep(table, [idx]))])
        else:
            x_row = builder.gep(x_p, [builder.mul(idx, ldx_)])
        xv = [load(vec_ptr(x_row, v), v) for v in range(vectors)]
        if rows_in_place:  # six row streams the hardware prefetches; row r's weight of step idx
            weights = [builder.gep(a_rows[r], [idx]) for r in range(ROWS)]
        else:
            w_row = builder.gep(w_p, [builder.mul(idx, _const(ROWS))])
            _prefetch(builder, builder.gep(ahead_p, [builder.mul(idx, _const(ROWS))]))
            weights = [builder.gep(w_row, [_const(r)]) for r in range(ROWS)]
        if stream:
            _prefetch(builder, builder.gep(x_row, [builder.mul(_const(stream), ldx_)]))
        for offset in range(0, lanes * vectors if next_columns else 0, 16):
            _prefetch(builder, builder.gep(x_row, [_const(next_columns + offset)]))
        new = []
        for r in range(ROWS):
            wv = broadcast(builder, builder.load(weights[r]), lanes)
            new.extend(fmuladd(builder, wv, xv[v], acc[r * vectors + v]) for v in range(vectors))
        if plus_one:  # the step's six weights (and two of the next step's, in unused lanes)
            xe = broadcast(builder, builder.load(builder.gep(xe_p, [builder.mul(idx, lde_)])))
            new.append(fmuladd(builder, builder.load(builder.bitcast(w_row, v8ptr), align=4), xe, acc[-1]))
        final = _close_loop(builder, idx, acc, new, kk, (pre, start), loop, done)
        final = _plus_residual(builder, res_a, final, lambda r, v: load(vec_ptr(row_ptr(r, res_p), v), v),
                               (lambda r: builder.load(builder.gep(row_ptr(r, res_p), [_const(lanes * vectors)])))
                               if plus_one else None, vectors)
        final = activate(builder, code_, p0_, p1_, final)
        for r in range(ROWS):
            row = builder.gep(c_p, [builder.mul(_const(r), ldc_)])
            with builder.if_then(builder.icmp_signed("<", _const(r), rows_)):
                for v in range(vectors):
                    store(final[r * vectors + v], vec_ptr(row, v), v)
                if plus_one:
                    value = builder.extract_element(final[-1], ir.Constant(_I32, r))
                    builder.store(value, builder.gep(row, [_const(lanes * vectors)]))
        return context.get_dummy_value()

    if rows_in_place:
        if plus_one or gather or stream:
            raise ValueError("the rows_in_place tile has no plus_one, gather or stream variant")
        if edge:
            @intrinsic
            def fc_tile_edge(typingctx, k, rows0, x, ldx, c, ldc, bias, first, rows, code, p0, p1, residual, cols,
                             lda):
                return _FC_EDGE_SIG, codegen

            return fc_tile_edge

        @intrinsic
        def fc_tile(typingctx, k, rows0, x, ldx, c, ldc, bias, first, rows, code, p0, p1, residual, lda):
            return _FC_SIG, codegen

        return fc_tile

    if plus_one:
        @intrinsic
        def tile_plus_one(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows, code, p0, p1, residual, xe, lde,
                          ahead):
            return _PLUS_SIG, codegen

        return tile_plus_one

    if edge:
        @intrinsic
        def tile_edge(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows, code, p0, p1, residual, cols, ahead):
            return _EDGE_SIG, codegen

        return tile_edge

    @intrinsic
    def tile(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows, code, p0, p1, residual, ahead):
        return _TILE_SIG, codegen

    return tile


LANES_ENV = "LOWERKIT_PANEL_LANES"  # "8" or "16": the wide tile's vectors whatever the CPU


def _lanes() -> int:
    """The tiles' vectors where the wide tile is there: 16 floats (its rows in two zmm registers,
    12 accumulators) where the CPU runs 512-bit vectors at full width, else 8 (four a row, 24);
    ``$LOWERKIT_PANEL_LANES`` chooses (one of the compile-time switches the kernel cache's
    name covers, ``jit.COMPILE_SWITCHES``). Intel Xeon VM (AVX-512, AMX), one thread, hot data,
    GFLOP/s 8 / 16 floats (``benchmarks/panel.py``): 576x96x196 102 / 139, 1152x192x49 97 /
    117, 1024x256x196 96 / 107, 256x2304x196 91 / 99 (OpenBLAS's 1024^3 sgemm there: 124)."""
    if TILE != 32:
        return 8
    chosen = os.environ.get(LANES_ENV, "")
    if chosen in ("8", "16"):
        return int(chosen)
    return 16 if host_full_width() else 8


LANES = _lanes()
# The tiles in LANES-float vectors: the wide tile's two or four a row, the 6 x 16 tiles' one or
# two (the 16-column tile after the wide ones on a map of 49 or 17 columns, the masked edges).
# 6 x 16 and its plus-one column in one zmm a row, against two ymm: the 49-column blocks of
# 7x7 maps ran 12 + 13 FMAs a step for 49 columns, now 12 + 7.
_tile32 = _tile_kernel(32 // LANES, edge=False, lanes=LANES)
# With 16-float vectors a block's whole 64 columns can be one tile: 24 accumulators, four image
# vectors and six broadcast weights per step for 24 FMAs (the 6 x 32 tile: two and six for 12).
_tile64 = _tile_kernel(4, edge=False, lanes=16) if LANES == 16 else _tile32
# The first panel's tiles of a block (read in place) also prefetch the next block's image: a
# block's 64 columns of each image row are 4 lines, each row in another page, too few and too
# many streams for the hardware prefetchers, so the first panel met every line in L3 or memory.
# The others find the block in L1. One thread, one image, this tree / without
# (``benchmarks/kernel_pair.py --rev``, median of 60 pairs, Intel Xeon VM): 128x512x784 0.81,
# 64x256x3136 0.83, 24x144x3136 0.87, 32x192x784 0.90, 1024x256x196 0.97; every tile
# prefetching instead lost up to 20% where the blocks were hot (576x96x196 1.20).
_tile64n = _tile_kernel(4, edge=False, lanes=16, next_columns=64) if LANES == 16 else _tile32
_tile16 = _tile_kernel(16 // LANES, edge=False, lanes=LANES)
_tile17 = _tile_kernel(16 // LANES, edge=False, plus_one=True, lanes=LANES)
# With 16-float vectors a 7x7 map's block of 49 columns is one tile: 48 columns in 18
# accumulators and the last as the plus-one column, where the 6 x 32 and 6 x 17 tiles took 12
# and 7 (fewer than two FMA units of four cycles' latency keep busy) and loaded the panel twice.
# Intel Xeon VM, one thread, four images (my script), 6 x 49 / 6 x 32 + 6 x 17: 2048x512 0.84,
# 1280x320 0.86, 320x960 0.84, 960x160 0.87, 576x96 0.84 of the time.
SEVEN_BY_SEVEN = LANES == 16
_tile49 = _tile_kernel(3, edge=False, plus_one=True, lanes=16) if SEVEN_BY_SEVEN else _tile17
# With 16-float vectors a block's image slice under the 6 x 64 tile, K_BLOCK rows of 64 columns, is
# 64 KB: more than the AVX-512 Xeon's 48 KB L1, so every panel after the first read it from L2.
# There the inner dimension goes in blocks of at most WIDE_K_BLOCK rows (32 KB), of equal lengths.
WIDE_K_BLOCK = 128
_K_STEP = WIDE_K_BLOCK if LANES == 16 else K_BLOCK


# A call over at most 16 columns (Winograd's tuple GEMMs on a 14x14 map at batch 1: 16 tiles)
# reads a 16-column image block of NARROW_K_BLOCK rows from L1 (32 KB of the Xeon's 48); one
# block over the whole inner dimension makes each panel, and a band of panels, one contiguous
# stream where blocks of 128 rows had skipped half of every panel. ResNet-50 at batch 1 on the
# Intel Xeon VM: its five 256x14x14 layers' GEMMs and output transform 0.92 -> 0.66 ms a layer
# inside the model. Measured with 16-float vectors only (32 KB is all of Zen's L1).
NARROW_K_BLOCK = 512 if LANES == 16 else _K_STEP


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _k_block(k, step):
    """Rows of the image per inner-dimension block for ``k`` rows: ``k`` in the fewest blocks of
    at most ``step`` rows, of equal lengths (the last may be shorter by a few)."""
    blocks = -(-k // step)
    return -(-k // blocks)


# fc_rows' tile: the weight is its image, one contiguous stream read once, prefetched this many
# 16-float rows (4 KB) ahead. One thread, 1280x1000 weights cycled from memory, 2-6 rows:
# 0.35-0.37 ms with none, 0.33-0.34 at 16 rows ahead, 0.24-0.26 at 64 (numpy's matmul 0.56-0.70).
STREAM_AHEAD = 64
_tile16s = _tile_kernel(16 // LANES, edge=False, stream=STREAM_AHEAD, lanes=LANES)
_edge16 = _tile_kernel(16 // LANES, edge=True, lanes=LANES)
_edge8 = _tile_kernel(1, edge=True)
# fc's tiles: six rows of x read in place, the bias per column
_fc16 = _tile_kernel(16 // LANES, edge=False, lanes=LANES, rows_in_place=True)
_fc_edge16 = _tile_kernel(16 // LANES, edge=True, lanes=LANES, rows_in_place=True)
_fc_edge8 = _tile_kernel(1, edge=True, rows_in_place=True)
# fc's bands (many rows: :func:`fc`, :func:`team_fc`) are FC_WIDTH columns wide, one tile of
# _fc_wide each. With 16-float vectors that is 64 columns (24 accumulators, four band vectors
# and six broadcast row values a step), where the 6 x 16 tile kept only six accumulators —
# fewer than the FMA units' latency needs. Intel Xeon VM, one thread (my script), GFLOP/s 6 x
# 16 / 6 x 64 (numpy's OpenBLAS sgemm): Swin-T's 49x768x3072 87 / 112 (88), 196x384x1536 110 /
# 158 (124), 3136x96x384 108 / 139 (130), DeiT-Tiny's 197x192x576 112 / 161 (125). With 8-float
# vectors (AVX2, Zen 4's halved AVX-512) the bands stay 16 wide: a wider tile not measured there.
FC_WIDTH = 64 if LANES == 16 else 16
_fc_wide = _tile_kernel(FC_WIDTH // LANES, edge=False, lanes=LANES, rows_in_place=True) if FC_WIDTH > 16 else _fc16
_UNROLL = 4  # independent accumulators of the one-column kernel


@intrinsic
def _column(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows, residual):
    """The 6 x 1 micro-kernel: the panel row (6 weights, 8 loaded) times one broadcast image
    value per step, in four accumulators; then rows r < ``rows`` stored one by one, each
    plus its ``residual`` element where that address is not 0."""

    def codegen(context, builder, signature, args):
        kk, panel_a, x_a, ldx_, c_a, ldc_, bias_a, first_, rows_, res_a = args
        has_res = builder.icmp_unsigned("!=", res_a, _const(0))
        res_p = builder.inttoptr(builder.select(has_res, res_a, c_a), _F32.as_pointer())  # c: valid, added as 0
        fptr, vptr = _F32.as_pointer(), _V8.as_pointer()
        w_p, x_p, c_p, b_p = (builder.inttoptr(a, fptr) for a in (panel_a, x_a, c_a, bias_a))
        zero = ir.Constant(_V8, [0.0] * 8)

        def step(i, acc):
            w = builder.load(builder.bitcast(builder.gep(w_p, [builder.mul(i, _const(ROWS))]), vptr), align=4)
            xs = builder.load(builder.gep(x_p, [builder.mul(i, ldx_)]))
            return fmuladd(builder, w, broadcast(builder, xs), acc)

        pre = builder.block
        main, after = builder.append_basic_block("col.main"), builder.append_basic_block("col.after")
        tail, done = builder.append_basic_block("col.tail"), builder.append_basic_block("col.done")
        k_main = builder.mul(builder.sdiv(kk, _const(_UNROLL)), _const(_UNROLL))
        builder.cbranch(builder.icmp_signed(">", k_main, _const(0)), main, after)
        builder.position_at_end(main)
        idx = builder.phi(_I64)
        idx.add_incoming(_const(0), pre)
        acc = []
        for _ in range(_UNROLL):
            phi = builder.phi(_V8)
            phi.add_incoming(zero, pre)
            acc.append(phi)
        new = [step(builder.add(idx, _const(u)), acc[u]) for u in range(_UNROLL)]
        nxt = builder.add(idx, _const(_UNROLL))
        idx.add_incoming(nxt, main)
        for phi, value in zip(acc, new):
            phi.add_incoming(value, main)
        builder.cbranch(builder.icmp_signed("<", nxt, k_main), main, after)
        builder.position_at_end(after)
        sums = []
        for value in new:
            phi = builder.phi(_V8)
            phi.add_incoming(zero, pre)
            phi.add_incoming(value, main)
            sums.append(phi)
        total = builder.fadd(builder.fadd(sums[0], sums[1]), builder.fadd(sums[2], sums[3]))
        builder.cbranch(builder.icmp_signed("<", k_main, kk), tail, done)
        builder.position_at_end(tail)
        t_idx, t_acc = builder.phi(_I64), builder.phi(_V8)
        t_idx.add_incoming(k_main, after)
        t_acc.add_incoming(total, after)
        t_new = step(t_idx, t_acc)
        t_next = builder.add(t_idx, _const(1))
        t_idx.add_incoming(t_next, tail)
        t_acc.add_incoming(t_new, tail)
        builder.cbranch(builder.icmp_signed("<", t_next, kk), tail, done)
        builder.position_at_end(done)
        result = builder.phi(_V8)
        result.add_incoming(total, after)
        result.add_incoming(t_new, tail)
        start = builder.load(builder.bitcast(b_p, vptr), align=4)
        for r in range(ROWS):
            with builder.if_then(builder.icmp_signed("<", _const(r), rows_)):
                p = builder.gep(c_p, [builder.mul(_const(r), ldc_)])
                base = builder.select(first_, builder.extract_element(start, ir.Constant(_I32, r)), builder.load(p))
                value = builder.fadd(base, builder.extract_element(result, ir.Constant(_I32, r)))
                extra = builder.load(builder.gep(res_p, [builder.mul(_const(r), ldc_)]))
                value = builder.fadd(value, builder.select(has_res, extra, ir.Constant(_F32, 0.0)))
                builder.store(value, p)
        return context.get_dummy_value()

    return _COLUMN_SIG, codegen


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _pack_block(x, strips, k0, kc, b0, b1):
    """Copy ``x[k0:k0+kc, b0:b1]`` into ``strips``: 16 columns at a time, each strip [kc, 16]
    contiguous (zeros past ``b1`` in the last)."""
    for s in range(-(-(b1 - b0) // 16)):
        j0 = b0 + s * 16
        width = min(16, b1 - j0)
        base = s * kc * 16
        if width == 16:
            for r in range(kc):
                o = base + r * 16
                for c in range(16):
                    strips[o + c] = x[k0 + r, j0 + c]
        else:
            for r in range(kc):
                o = base + r * 16
                for c in range(width):
                    strips[o + c] = x[k0 + r, j0 + c]
                for c in range(width, 16):
                    strips[o + c] = 0.0


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _column_at(xp, j, kc, pack):
    """Address of column ``j`` of the block (from its first column) at ``xp``: in its strip
    (packed: strips of 16 columns, ``kc`` rows each), or ``j`` floats on (in place)."""
    if pack:
        return xp + np.uint64(4 * ((j // 16) * kc * 16 + j % 16))
    return xp + np.uint64(4 * j)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _at(address, floats):
    """``address`` moved on by ``floats`` floats, or 0 (no residual) where it is 0."""
    return address + np.uint64(4 * floats) if address != 0 else np.uint64(0)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _ahead(wa, p, pa, pb, k, k0, kb):
    """The address a tile of panel ``p``'s block at row ``k0`` prefetches from (``wa``: the
    panels): ``PREFETCH`` floats on where one block covers the inner dimension (the band is one
    stream), else the block the next panel's tiles read — the next panel's, or the band's first
    panel's next block after its last panel."""
    f = np.uint64(4)
    if kb < k and p + 1 < pb:
        return wa + f * np.uint64((p + 1) * k * ROWS + k0 * ROWS)
    if kb < k and k0 + kb < k:
        return wa + f * np.uint64(pa * k * ROWS + (k0 + kb) * ROWS)
    return wa + f * np.uint64(p * k * ROWS + k0 * ROWS) + _PREFETCH_BYTES


_GEMM_SIG = types.void(ro(1), ro(1), ro(2), rw(2), rw(1), i8, i8, i8, i8, f8, f8, i8, i8, i8, i8, ro(2))


@njit(nogil=True, cache=True, error_model="numpy")
def _gemm_at(panels, bias, x, out, strips, k, m, nc, code, p0, p1, pa, pb, n0, n1, c0, residual):
    """:func:`gemm` into the columns of ``out`` from ``c0`` on: column j of ``x`` goes to column
    ``c0 + j`` of ``out`` (a tile of an image's columns into its place in the output), plus the
    same element of ``residual`` (shaped like ``out``; empty for none) before the activation."""
    ldx, ldc = x.shape[1], out.shape[1]
    aliased = pb - pa >= ALIASING_PANELS and (4 * ldx) % ALIASING_BYTES == 0
    pack = PACKS and strips.size >= K_BLOCK * (nc + 16) and ((pb - pa >= PACK_PANELS and k >= PACK_INPUTS) or aliased)
    wa, ca, ba = panels.ctypes.data, out.ctypes.data + np.uint64(4 * c0), bias.ctypes.data
    ra = residual.ctypes.data + np.uint64(4 * c0) if residual.size > 0 else np.uint64(0)
    xa = strips.ctypes.data if pack else x.ctypes.data
    of = out.reshape(-1)  # flat: no row view (two atomic reference counts) per activated row
    f = np.uint64(4)
    kb = _k_block(k, NARROW_K_BLOCK if n1 - n0 <= 16 and not pack else _K_STEP)
    b0 = n0
    while b0 < n1:
        b1 = min(n1, b0 + nc)
        if n1 - b1 < 16:  # the last block takes a remainder under 16: no pass over the panels for it alone
            b1 = n1
        full = b0 + (b1 - b0) // 16 * 16
        rest = b1 - full
        plus_one = rest == 1 and full > b0  # the last column rides on the last tile
        stop = full - 16 if plus_one else full  # the plain tiles' columns: [b0, stop)
        one_tile = SEVEN_BY_SEVEN and plus_one and full - b0 == 48  # _tile49 takes the whole block
        for k0 in range(0, k, kb):
            kc = min(kb, k - k0)
            first = k0 == 0
            last = k0 + kc == k
            if pack:
                _pack_block(x, strips, k0, kc, b0, b1)
                ld, xp = 16, xa
            else:
                ld, xp = ldx, xa + f * np.uint64(k0 * ldx + b0)
            # The tiles activate their accumulators (codes with an IR form); act_span runs the
            # others, and the one-column kernel's columns.
            in_tile = last and code in IR_CODES
            tile_code = code if in_tile else 0
            for p in range(pa, pb):
                rows = min(ROWS, m - p * ROWS)
                wp = wa + f * np.uint64(p * k * ROWS + k0 * ROWS)
                bp = ba + f * np.uint64(p * ROWS)
                cp = ca + f * np.uint64(p * ROWS * ldc)
                rp = _at(ra, p * ROWS * ldc) if last else np.uint64(0)  # the residual, with the last block
                ahead = _ahead(wa, p, pa, pb, k, k0, kb)
                j = b0
                if one_tile:  # a 7x7 map's 49 columns
                    _tile49(kc, wp, _column_at(xp, 0, kc, pack), ld, cp + f * np.uint64(b0), ldc, bp, first, rows,
                            tile_code, p0, p1, _at(rp, b0), _column_at(xp, full - b0, kc, pack), ld, ahead)
                    j = stop  # the other tiles have nothing left, the plus-one column is done
                if LANES == 16:
                    while j + 64 <= stop:
                        if p == pa:  # (16-float vectors: the image is read in place, never packed)
                            _tile64n(kc, wp, _column_at(xp, j - b0, kc, pack), ld, cp + f * np.uint64(j), ldc, bp,
                                     first, rows, tile_code, p0, p1, _at(rp, j), ahead)
                        else:
                            _tile64(kc, wp, _column_at(xp, j - b0, kc, pack), ld, cp + f * np.uint64(j), ldc, bp,
                                    first, rows, tile_code, p0, p1, _at(rp, j), ahead)
                        j += 64
                if TILE == 32:
                    while j + 32 <= stop:
                        _tile32(kc, wp, _column_at(xp, j - b0, kc, pack), ld, cp + f * np.uint64(j), ldc, bp, first,
                                rows, tile_code, p0, p1, _at(rp, j), ahead)
                        j += 32
                while j < stop:
                    _tile16(kc, wp, _column_at(xp, j - b0, kc, pack), ld, cp + f * np.uint64(j), ldc, bp, first,
                            rows, tile_code, p0, p1, _at(rp, j), ahead)
                    j += 16
                if plus_one and not one_tile:  # the last tile takes the last column along
                    _tile17(kc, wp, _column_at(xp, stop - b0, kc, pack), ld, cp + f * np.uint64(stop), ldc, bp,
                            first, rows, tile_code, p0, p1, _at(rp, stop), _column_at(xp, full - b0, kc, pack), ld,
                            ahead)
                xe, ce = _column_at(xp, full - b0, kc, pack), cp + f * np.uint64(full)
                if rest > 8:  # the partial tile: masked, or one column at a time where that is cheaper
                    _edge16(kc, wp, xe, ld, ce, ldc, bp, first, rows, tile_code, p0, p1, _at(rp, full), rest, ahead)
                elif rest > 3:
                    _edge8(kc, wp, xe, ld, ce, ldc, bp, first, rows, tile_code, p0, p1, _at(rp, full), rest, ahead)
                elif not plus_one:
                    for j in range(rest):
                        _column(kc, wp, xe + f * np.uint64(j), ld, ce + f * np.uint64(j), ldc, bp, first, rows,
                                _at(rp, full + j))
                if last and code != 0:
                    # act_span: every column, or only the one-column kernel's (the tiles did theirs)
                    lo = b0 if not in_tile else (full if rest <= 3 and not plus_one else b1)
                    if lo < b1:
                        for r in range(p * ROWS, p * ROWS + rows):
                            act_span(of, r * ldc + c0 + lo, r * ldc + c0 + b1, code, p0, p1)
        b0 = b1


@njit(_GEMM_SIG, nogil=True, cache=True, error_model="numpy")
def gemm(panels, bias, x, out, strips, k, m, nc, code, p0, p1, pa, pb, n0, n1, residual):
    """``out[rows of panels pa..pb, n0:n1] = act(w @ x[:, n0:n1] + bias + residual[...])``
    (``panels``, ``bias`` as ``PackedWeight`` holds them; ``x`` [K, N], ``out`` [M, N] and
    ``residual`` [M, N] or empty for none, C order; ``m`` = M; blocks of ``nc`` columns).
    With the narrow tile (``PACKS``), at least ``PACK_PANELS`` panels and ``PACK_INPUTS`` rows
    (or ``ALIASING_PANELS`` and image rows ``ALIASING_BYTES`` apart), and ``strips`` of at least ``STRIP_FLOATS``
    floats (scratch; any size else), each block of the image is first copied into 16-column
    strips there (as BLAS packs), which every panel then reads contiguously."""
    _gemm_at(panels, bias, x, out, strips, k, m, nc, code, p0, p1, pa, pb, n0, n1, 0, residual)


_TILES_SIG = types.void(ro(1), ro(1), ro(3), rw(3), rw(1), rw(1), i8, i8, i8, i8, f8, f8,
                        i8, i8, i8, i8, i8, i8, i8, i8, i8, i8, i8, ro(3))


@njit(_TILES_SIG, nogil=True, cache=True, error_model="numpy")
def conv_tiles(panels, bias, x, out, cols, strips, k, m, nc, code, p0, p1, kh, kw, sh, sw, pt, pl, dh, dw,
               tile_rows, r0, r1, residual):
    """Output rows [r0, r1) of one image's convolution, ``out`` [M, OH, OW] = act(w @ columns
    + bias) for ``x`` [C, H, W] (``k`` = C*KH*KW), ``tile_rows`` output rows at a time: the
    tile's columns by :func:`.conv.im2col` into ``cols`` (at least ``k * tile_rows * OW``
    floats), then the panel GEMM over them while they are in cache — no column matrix for the
    whole image (NNPACK's implicit GEMM, on the packed weight). One thread: every entry point
    that calls the GEMM links and optimizes its own copy of it, and a team form of this one
    cost 13 s more of first-ever compile for ~0.2 ms on ResNet's stem at batch 1. ``residual``
    ([M, OH, OW], or empty) is added before the activation."""
    oh, ow = out.shape[1], out.shape[2]
    flat = out.reshape(m, oh * ow)
    added = residual.reshape(m, oh * ow) if residual.size > 0 else residual.reshape(0, 0)
    count = -(-m // ROWS)
    for a in range(r0, r1, tile_rows):
        rows = min(tile_rows, r1 - a)
        tile = cols[:k * rows * ow].reshape(k, rows, ow)
        im2col(x, tile, kh, kw, sh, sw, pt - a * sh, pl, dh, dw, 0, rows)
        _gemm_at(panels, bias, tile.reshape(k, rows * ow), flat, strips, k, m, nc, code, p0, p1, 0, count, 0,
                 rows * ow, a * ow, added)


@njit(types.void(ro(1), ro(1), ro(3), rw(3), rw(1), i8, i8, i8, i8, f8, f8, ro(3)), nogil=True, cache=True,
      error_model="numpy")
def gemm_images(panels, bias, x, out, strips, k, m, nc, code, p0, p1, residual):
    """:func:`gemm` for every image of ``x`` [N, K, P] into ``out`` [N, M, P] (plus
    ``residual`` [N, M, P], or empty), all panels and columns: one crossing into compiled code
    per layer, not one per image. (Two threads running batch slices in one process wait on
    each other for the GIL at every crossing.)"""
    count = -(-m // ROWS)
    for i in range(x.shape[0]):
        added = residual[i] if residual.size > 0 else residual.reshape(0, 0)
        gemm(panels, bias, x[i], out[i], strips, k, m, nc, code, p0, p1, 0, count, 0, x.shape[2], added)


@njit(types.void(ro(1), ro(1), ro(3), rw(3), i8, i8, i8, i8, i8, i8), nogil=True, cache=True, error_model="numpy")
def tuple_gemms(panels, zeros, v, m, k, oc, nc, q0, q1, cols):
    """Winograd's channel GEMMs on the packed ``U`` (``panels.PackedTuples``: 36 tuples of
    ``-(-oc // ROWS)`` panels of ``k`` inputs each; ``zeros`` its zero bias): for every tuple a,
    the rows of panels [q0, q1) of ``U[a] @ v[a][:, :cols]`` into rows 0.. of ``m[a]`` (``v``
    [36, k, T], ``m`` [36, at least the band's rows, T], C order)."""
    count = -(-oc // ROWS)
    size = count * k * ROWS
    rows = min(oc, q1 * ROWS) - q0 * ROWS
    none, no_strips = np.empty((0, 0), np.float32), np.empty(0, np.float32)
    for a in range(36):
        start = a * size + q0 * k * ROWS
        _gemm_at(panels[start:], zeros, v[a], m[a], no_strips, k, rows, nc, 0, 0.0, 0.0, 0, q1 - q0, 0, cols, 0, none)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _team_band(panels, bias, x, out, strips, k, m, nc, code, p0, p1, j, ways, by_columns, residual):
    """Thread ``j``'s band of :func:`team_gemm`: columns (multiples of 16) with ``by_columns``,
    else panels; its own ``STRIP_FLOATS`` of ``strips`` where those are there."""
    n = x.shape[1]
    count = -(-m // ROWS)
    share = STRIP_FLOATS if strips.size >= ways * STRIP_FLOATS else 0
    mine = strips[j * share : (j + 1) * share]
    if by_columns:
        tiles = -(-n // 16)
        s0, s1 = tiles * j // ways, tiles * (j + 1) // ways
        if s1 > s0:
            gemm(panels, bias, x, out, mine, k, m, nc, code, p0, p1, 0, count, 16 * s0, min(n, 16 * s1), residual)
    else:
        q0, q1 = count * j // ways, count * (j + 1) // ways
        if q1 > q0:
            gemm(panels, bias, x, out, mine, k, m, nc, code, p0, p1, q0, q1, 0, n, residual)


@njit(types.void(ro(1), ro(1), ro(2), rw(2), rw(1), i8, i8, i8, i8, f8, f8, i8, types.boolean, ro(2)),
      nogil=True, cache=True, parallel=True, error_model="numpy")
def team_gemm(panels, bias, x, out, strips, k, m, nc, code, p0, p1, ways, by_columns, residual):
    """:func:`gemm` over the whole output in one team region: ``ways`` bands of columns
    (multiples of 16) with ``by_columns``, else of panels; thread j copies into its own
    ``STRIP_FLOATS`` of ``strips`` where those are there (``ways * STRIP_FLOATS``)."""
    for j in prange(ways):
        _team_band(panels, bias, x, out, strips, k, m, nc, code, p0, p1, j, ways, by_columns, residual)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _scale_panels(panels, gate, copy, k, count, q0, q1):
    """Panels [q0, q1) of ``count`` with their K rows scaled by ``gate`` [K] into ``copy``, and
    ``copy``'s PAD floats past the last panel zero (a tile may read them)."""
    copy[count * k * ROWS :] = 0.0
    for q in range(q0, q1):
        base = q * k * ROWS
        for kk in range(k):
            g = gate[kk]
            at = base + kk * ROWS
            for r in range(ROWS):
                copy[at + r] = panels[at + r] * g


@njit(types.void(ro(1), ro(1), rw(2), ro(1), ro(2), rw(2), rw(1), i8, i8, i8, i8, f8, f8, i8, types.boolean, ro(2)),
      nogil=True, cache=True, parallel=True, error_model="numpy")
def team_gated_gemm(panels, gate, scaled, bias, x, out, strips, k, m, nc, code, p0, p1, ways, by_columns, residual):
    """:func:`team_gemm` of the weight with its K rows of columns scaled by ``gate`` [K] (a
    squeeze-excitation gate folded into a 1x1 convolution: ``w @ (gate * x)``). Each thread
    scales the panels it multiplies (all of them with ``by_columns``) into its own row of
    ``scaled`` [ways, panels.size] (uninitialised is fine) and multiplies its copy: a weight
    scaled by one thread and read by another crossed between the cores on every call (on the
    2-vCPU VM the kernels are measured on, longer than the GEMM itself on 7x7 and 14x14 maps)."""
    count = -(-m // ROWS)
    for j in prange(ways):
        copy = scaled[j]
        q0, q1 = (0, count) if by_columns else (count * j // ways, count * (j + 1) // ways)
        _scale_panels(panels, gate, copy, k, count, q0, q1)
        _team_band(copy, bias, x, out, strips, k, m, nc, code, p0, p1, j, ways, by_columns, residual)


@njit(types.void(ro(1), ro(2), rw(1), ro(1), ro(3), rw(3), rw(1), i8, i8, i8, i8, f8, f8), nogil=True, cache=True,
      error_model="numpy")
def gated_gemm_images(panels, gates, scaled, bias, x, out, strips, k, m, nc, code, p0, p1):
    """:func:`gemm_images` of the weight with its K rows of columns scaled by each image's gate
    (``gates`` [N, K]): per image the panels scaled into ``scaled`` (``panels.size`` floats),
    then multiplied. One crossing into compiled code per layer: with numpy's multiply and a
    GEMM call per image, two batch slices running side by side (MobileNetV3-Small at batch 8)
    had spent 40-60% longer in these layers than one slice alone."""
    count = -(-m // ROWS)
    none = np.empty((0, 0), np.float32)
    for i in range(x.shape[0]):
        _scale_panels(panels, gates[i], scaled, k, count, 0, count)
        _gemm_at(scaled, bias, x[i], out[i], strips, k, m, nc, code, p0, p1, 0, count, 0, x.shape[2], 0, none)


# fc's column chunk: the bands that one row panel's tiles sweep before the next row panel
# takes them, sized to stay in L2 between the two.
FC_CHUNK_FLOATS = 32_768  # 128 KB


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _pack_rows(x, xpanel, r0, r1):
    """Rows [r0, r1) of ``x`` [R, K] as row panels of ``ROWS``: ``xpanel[(q * K + k) * ROWS +
    r] = x[r0 + q * ROWS + r, k]`` (zeros past ``r1``), as :func:`fc_rows` copies its few."""
    k = x.shape[1]
    for q in range(-(-(r1 - r0) // ROWS)):
        base = q * k * ROWS
        for r in range(ROWS):
            row = r0 + q * ROWS + r
            if row < r1:
                for kk in range(k):
                    xpanel[base + kk * ROWS + r] = x[row, kk]
            else:
                for kk in range(k):
                    xpanel[base + kk * ROWS + r] = 0.0


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _band_share(n, j, ways):
    """Columns ``(c0, c1)`` of thread ``j``'s share of the ``ceil(n / 16)`` bands (whole
    bands; the thread with the last one takes its columns up to ``n``)."""
    count = -(-n // 16)
    return 16 * (count * j // ways), min(n, 16 * (count * (j + 1) // ways))


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _fc_stream(x, bands, bias, out, xpanel, code, p0, p1, c0, c1):
    """Columns [c0, c1) of :func:`fc_rows` (``c0`` a multiple of 16; ``c1`` too, or N): its
    few rows copied into one row panel, the output's columns set to the bias, then the tile
    that prefetches each band ahead over every band (a weight read from memory once)."""
    k = x.shape[1]
    n = out.shape[1]
    rows = x.shape[0]
    _pack_rows(x, xpanel, 0, rows)
    in_tile = code in IR_CODES
    tile_code = code if in_tile else 0
    has_bias = bias.size > 0
    of = out.reshape(-1)
    f = np.uint64(4)
    wp, cp, xa = xpanel.ctypes.data, out.ctypes.data, bands.ctypes.data
    whole = min(c1, n // 16 * 16)  # whole bands in [c0, whole), a partial one in [whole, c1)
    for r in range(rows):  # the tiles add onto the bias (first=False)
        for j in range(c0, c1):
            of[r * n + j] = bias[j] if has_bias else 0.0
    for b in range(c0 // 16, whole // 16):
        _tile16s(k, wp, xa + f * np.uint64(b * k * 16), 16, cp + f * np.uint64(b * 16), n, wp, False, rows,
                 tile_code, p0, p1, _NONE, wp + _PREFETCH_BYTES)
    rest = c1 - whole
    if rest > 0:
        xe, ce = xa + f * np.uint64(whole * k), cp + f * np.uint64(whole)
        if rest > 8:
            _edge16(k, wp, xe, 16, ce, n, wp, False, rows, tile_code, p0, p1, _NONE, rest, wp + _PREFETCH_BYTES)
        else:
            _edge8(k, wp, xe, 16, ce, n, wp, False, rows, tile_code, p0, p1, _NONE, rest, wp + _PREFETCH_BYTES)
    if code != 0 and not in_tile:  # the GELUs
        for r in range(rows):
            act_span(of, r * n + c0, r * n + c1, code, p0, p1)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _fc_block(x, bands, bias, out, code, p0, p1, r0, r1, c0, c1, residual):
    """Rows [r0, r1) and columns [c0, c1) of :func:`fc` (``c0`` a multiple of 16; ``c1`` too,
    or N) on bands of ``FC_WIDTH`` columns: a chunk of the bands at a time, every group of six
    rows' tiles over the chunk (the chunk stays in L2, the six rows — read where they lie — in
    L1), each tile starting from its columns' bias and adding its part of ``residual`` (shaped
    like ``out``; empty for none) before the activation; a whole band is one wide tile, the
    columns of a band the range covers only in part go 16 at a time."""
    k = x.shape[1]
    n = out.shape[1]
    ra = residual.ctypes.data if residual.size > 0 else np.uint64(0)
    in_tile = code in IR_CODES
    tile_code = code if in_tile else 0
    zeros = np.zeros(0 if bias.size > 0 else n + 16, np.float32)  # the bias where there is none
    column_bias = bias if bias.size > 0 else zeros
    of = out.reshape(-1)
    f = np.uint64(4)
    xa, oa, ba, bb = x.ctypes.data, out.ctypes.data, bands.ctypes.data, column_bias.ctypes.data
    width = FC_WIDTH
    chunk = max(1, FC_CHUNK_FLOATS // (k * width)) * width
    j0 = c0
    while j0 < c1:
        j1 = min(c1, j0 // width * width + chunk)  # chunks end on band boundaries
        for row in range(r0, r1, ROWS):
            rows = min(ROWS, r1 - row)
            ap = xa + f * np.uint64(row * k)
            cp = oa + f * np.uint64(row * n)
            rp = _at(ra, row * n)
            for b in range(j0 // width, -(-j1 // width)):
                c = b * width
                band = ba + f * np.uint64(c * k)
                lo, hi = max(c, j0), min(c + width, j1)
                if hi - lo == width:
                    _fc_wide(k, ap, band, width, cp + f * np.uint64(c), n, bb + f * np.uint64(c), True, rows,
                             tile_code, p0, p1, _at(rp, c), k)
                    continue
                s = lo
                while s + 16 <= hi:
                    _fc16(k, ap, band + f * np.uint64(s - c), width, cp + f * np.uint64(s), n, bb + f * np.uint64(s),
                          True, rows, tile_code, p0, p1, _at(rp, s), k)
                    s += 16
                rest = hi - s
                xe, ce, be = band + f * np.uint64(s - c), cp + f * np.uint64(s), bb + f * np.uint64(s)
                if rest > 8:
                    _fc_edge16(k, ap, xe, width, ce, n, be, True, rows, tile_code, p0, p1, _at(rp, s), rest, k)
                elif rest > 0:
                    _fc_edge8(k, ap, xe, width, ce, n, be, True, rows, tile_code, p0, p1, _at(rp, s), rest, k)
            if code != 0 and not in_tile:  # the GELUs, on the rows while they are in L1
                for r in range(row, row + rows):
                    act_span(of, r * n + j0, r * n + j1, code, p0, p1)
        j0 = j1


@njit(types.void(ro(2), ro(1), ro(1), rw(2), rw(1), i8, f8, f8), nogil=True, cache=True, error_model="numpy")
def fc_rows(x, bands, bias, out, xpanel, code, p0, p1):
    """``out = act(x @ w + bias)`` for a few rows of ``x`` [R, K] (R <= ``ROWS``), ``w`` [K, N]
    packed as :func:`pack_bands` packs it (16 columns a band, each band [K, 16] contiguous),
    ``bias`` [N] (or empty), ``out`` [R, N]: the 6 x 16 tile with the roles turned — the rows of
    ``x`` (copied into ``xpanel``, at least K * ROWS + PAD floats) as its panel, a band of the
    weight as its image — so the weight streams once, contiguously, whatever R is (BLAS's
    ``sgemm`` copies the whole weight first for a few rows; ``gemv`` reads it once per row).
    :func:`fc`'s loop, on the tile that prefetches the weight's stream ahead."""
    _fc_stream(x, bands, bias, out, xpanel, code, p0, p1, 0, out.shape[1])


@njit(types.void(ro(2), ro(1), ro(1), rw(2), rw(2), i8, f8, f8, i8), nogil=True, cache=True, parallel=True,
      error_model="numpy")
def team_fc_rows(x, bands, bias, out, xpanels, code, p0, p1, ways):
    """:func:`fc_rows` as one team region: thread j takes the j-th share of the bands
    (:func:`_band_share`), with its own copy of the rows in
    ``xpanels[j]``, so each thread streams its part of the weight — the one-row classifier
    of a model at batch 1, memory-bound, on both cores' caches and bandwidth."""
    for j in prange(ways):
        c0, c1 = _band_share(out.shape[1], j, ways)
        if c1 > c0:
            _fc_stream(x, bands, bias, out, xpanels[j], code, p0, p1, c0, c1)


@njit(types.void(ro(2), ro(1), ro(1), rw(2), i8, f8, f8, ro(2)), nogil=True, cache=True, error_model="numpy")
def fc(x, bands, bias, out, code, p0, p1, residual):
    """``out = act(x @ w + bias + residual)`` for any number of rows of ``x`` [R, K] (a
    transformer's tokens, a channels-last map's pixels), ``w`` packed by :func:`pack_bands` in
    bands of ``FC_WIDTH``, ``residual`` [R, N] or empty for none (a fused residual add), on the
    calling thread: a 6 x ``FC_WIDTH`` tile over each six rows of ``x``, read in place (BLAS's
    ``sgemm`` packs the weight again every call)."""
    _fc_block(x, bands, bias, out, code, p0, p1, 0, x.shape[0], 0, out.shape[1], residual)


@njit(types.void(ro(2), ro(1), ro(1), rw(2), i8, f8, f8, i8, types.boolean, ro(2)), nogil=True, cache=True,
      parallel=True, error_model="numpy")
def team_fc(x, bands, bias, out, code, p0, p1, ways, by_columns, residual):
    """:func:`fc` as one team region: thread j takes the j-th share of the groups of six rows
    (each thread reads all the weight) or, ``by_columns``, of the bands (each reads all the
    rows and its part of the weight: a large weight, few rows)."""
    r_n = x.shape[0]
    n = out.shape[1]
    panels_n = -(-r_n // ROWS)
    for j in prange(ways):
        if by_columns:
            c0, c1 = _band_share(n, j, ways)
            if c1 > c0:
                _fc_block(x, bands, bias, out, code, p0, p1, 0, r_n, c0, c1, residual)
        else:
            r0, r1 = ROWS * (panels_n * j // ways), min(r_n, ROWS * (panels_n * (j + 1) // ways))
            if r1 > r0:
                _fc_block(x, bands, bias, out, code, p0, p1, r0, r1, 0, n, residual)


def pack_bands(w: np.ndarray, width: int = 16) -> np.ndarray:
    """``w`` [K, N] in bands of ``width`` columns, band b = ``w[:, width * b : width * (b + 1)]``
    contiguous (zeros past N), flat, then ``PAD`` floats: as :func:`fc_rows` reads it with
    ``width`` 16, as :func:`fc` does with ``FC_WIDTH``."""
    k, n = w.shape
    count = -(-n // width)
    padded = np.zeros((k, count * width), np.float32)
    padded[:, :n] = w
    flat = np.zeros(count * width * k + PAD, np.float32)
    flat[: count * width * k] = padded.reshape(k, count, width).transpose(1, 0, 2).reshape(-1)
    return flat
