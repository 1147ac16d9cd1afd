"""A GEMM on weights packed once into panels, with the convolution epilogue fused:
``out = act(w @ x + bias)`` for a 1x1 convolution's weight ``w`` [M, K] and an image ``x``
[K, N] read in place.

BLAS's ``sgemm`` packs both operands on every call. For a pointwise layer of a mobile network
that is the cost that matters: the weight is small and the same every call, and with few
output channels (MobileNetV2's 96x16 at 112x112) or few input channels the packing of the
image is a large part of the work, then the epilogue reads the whole output back. Here the
weight is packed at bind time (``lowerkit.backend.cpu.panels.PackedWeight``) in panels of 6
rows, ``panel[k, r] = w[6p + r, k]``; the image is not packed: a block of ``nc`` columns
(``panels.block_columns``), small enough to stay in L1, is multiplied by every panel where
it lies. The micro-kernels are LLVM IR (through numba intrinsics, so every register is
explicit): a tile of 6 rows x 16 columns in twelve 8-float accumulators, ``fmuladd`` per step
(one FMA instruction where the CPU has FMA), started from the bias; the activation runs on
the tile's rows while they are in L1. Columns past the last multiple of 16 take a 6 x 8
tile, then 6 x 1 (the panel as one vector).

Kernels:

- :func:`gemm` — panels [pa, pb) x columns [n0, n1) on the calling thread;
- :func:`team_gemm` — one team region (see :mod:`.layer`), bands of columns or of panels.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ._act import act_span
from ._types import f8, i8, ro, rw
from .layer import team_ready

team_ready()  # team_gemm is a parallel region: choose the threading layer first

ROWS = 6  # output channels of a panel (of a tile)
PAD = 8  # floats the packed weight and bias need after their end: the 6 x 1 tile loads 8
K_BLOCK = 256  # inner-dimension block: a tile's panel slice stays in L1

_F32 = ir.FloatType()
_V8 = ir.VectorType(_F32, 8)
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_ZEROS = [0] * 8


def _fmuladd(builder, a, b, c):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8, [_V8, _V8, _V8]), "llvm.fmuladd.v8f32")
    return builder.call(fn, [a, b, c])


def _broadcast(builder, scalar):
    v = builder.insert_element(ir.Constant(_V8, ir.Undefined), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(_V8, ir.Undefined), ir.Constant(ir.VectorType(_I32, 8), _ZEROS))


def _const(v):
    return ir.Constant(_I64, v)


_TILE_SIG = types.void(i8, types.uint64, types.uint64, i8, types.uint64, i8, types.uint64, types.boolean, i8)


def _tile_kernel(vectors: int):
    """The 6 x (8 * ``vectors``) micro-kernel: ``c[r, :] = (first ? bias[r] : c[r, :]) +
    sum over k of panel[k, r] * x[k, :]`` for rows r < ``rows``. Addresses as integers,
    strides in floats."""

    @intrinsic
    def tile(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows):
        def codegen(context, builder, signature, args):
            kk, panel_a, x_a, ldx_, c_a, ldc_, bias_a, first_, rows_ = args
            fptr, vptr = _F32.as_pointer(), _V8.as_pointer()
            w_p, x_p, c_p, b_p = (builder.inttoptr(a, fptr) for a in (panel_a, x_a, c_a, bias_a))

            def row_ptr(r):  # rows past ``rows`` read row 0 (valid memory; never stored)
                valid = builder.icmp_signed("<", _const(r), rows_)
                return builder.gep(c_p, [builder.mul(builder.select(valid, _const(r), _const(0)), ldc_)])

            def vec_ptr(base, v):
                return builder.bitcast(builder.gep(base, [_const(8 * v)]), vptr)

            from_bias = [_broadcast(builder, builder.load(builder.gep(b_p, [_const(r)])))
                         for r in range(ROWS) for _ in range(vectors)]
            from_c = [builder.load(vec_ptr(row_ptr(r), v), align=4) for r in range(ROWS) for v in range(vectors)]
            start = [builder.select(first_, a, b) for a, b in zip(from_bias, from_c)]
            pre = builder.block
            loop, done = builder.append_basic_block("tile.loop"), builder.append_basic_block("tile.done")
            builder.cbranch(builder.icmp_signed(">", kk, _const(0)), loop, done)
            builder.position_at_end(loop)
            idx = builder.phi(_I64)
            idx.add_incoming(_const(0), pre)
            acc = []
            for s in start:
                phi = builder.phi(_V8)
                phi.add_incoming(s, pre)
                acc.append(phi)
            x_row = builder.gep(x_p, [builder.mul(idx, ldx_)])
            xv = [builder.load(vec_ptr(x_row, v), align=4) for v in range(vectors)]
            w_row = builder.gep(w_p, [builder.mul(idx, _const(ROWS))])
            new = []
            for r in range(ROWS):
                wv = _broadcast(builder, builder.load(builder.gep(w_row, [_const(r)])))
                new.extend(_fmuladd(builder, wv, xv[v], acc[r * vectors + v]) for v in range(vectors))
            nxt = builder.add(idx, _const(1))
            idx.add_incoming(nxt, builder.block)
            for phi, value in zip(acc, new):
                phi.add_incoming(value, builder.block)
            builder.cbranch(builder.icmp_signed("<", nxt, kk), loop, done)
            builder.position_at_end(done)
            final = []
            for s, value in zip(start, new):
                phi = builder.phi(_V8)
                phi.add_incoming(s, pre)
                phi.add_incoming(value, loop)
                final.append(phi)
            for r in range(ROWS):
                row = builder.gep(c_p, [builder.mul(_const(r), ldc_)])
                with builder.if_then(builder.icmp_signed("<", _const(r), rows_)):
                    for v in range(vectors):
                        builder.store(final[r * vectors + v], vec_ptr(row, v), align=4)
            return context.get_dummy_value()

        return _TILE_SIG, codegen

    return tile


_tile16 = _tile_kernel(2)
_tile8 = _tile_kernel(1)
_UNROLL = 4  # independent accumulators of the one-column kernel


@intrinsic
def _column(typingctx, k, panel, x, ldx, c, ldc, bias, first, rows):
    """The 6 x 1 micro-kernel: the panel row (6 weights, 8 loaded) times one broadcast image
    value per step, in four accumulators; then rows r < ``rows`` stored one by one."""

    def codegen(context, builder, signature, args):
        kk, panel_a, x_a, ldx_, c_a, ldc_, bias_a, first_, rows_ = args
        fptr, vptr = _F32.as_pointer(), _V8.as_pointer()
        w_p, x_p, c_p, b_p = (builder.inttoptr(a, fptr) for a in (panel_a, x_a, c_a, bias_a))
        zero = ir.Constant(_V8, [0.0] * 8)

        def step(i, acc):
            w = builder.load(builder.bitcast(builder.gep(w_p, [builder.mul(i, _const(ROWS))]), vptr), align=4)
            xs = builder.load(builder.gep(x_p, [builder.mul(i, ldx_)]))
            return _fmuladd(builder, w, _broadcast(builder, xs), acc)

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
                builder.store(builder.fadd(base, builder.extract_element(result, ir.Constant(_I32, r))), p)
        return context.get_dummy_value()

    return _TILE_SIG, codegen


_GEMM_SIG = types.void(ro(1), ro(1), ro(2), rw(2), i8, i8, i8, i8, f8, f8, i8, i8, i8, i8)


@njit(_GEMM_SIG, nogil=True, cache=True, error_model="numpy")
def gemm(panels, bias, x, out, k, m, nc, code, p0, p1, pa, pb, n0, n1):
    """``out[rows of panels pa..pb, n0:n1] = act(w @ x[:, n0:n1] + bias)`` (``panels``,
    ``bias`` as ``PackedWeight`` holds them; ``x`` [K, N], ``out`` [M, N], C order; ``m`` =
    M; blocks of ``nc`` columns)."""
    ldx, ldc = x.shape[1], out.shape[1]
    wa, xa, ca, ba = panels.ctypes.data, x.ctypes.data, out.ctypes.data, bias.ctypes.data
    of = out.reshape(-1)  # flat: no row view (two atomic reference counts) per activated row
    f = np.uint64(4)
    for b0 in range(n0, n1, nc):
        b1 = min(n1, b0 + nc)
        s16 = b0 + (b1 - b0) // 16 * 16
        s8 = s16 + (b1 - s16) // 8 * 8
        for k0 in range(0, k, K_BLOCK):
            kc = min(K_BLOCK, k - k0)
            first = k0 == 0
            last = k0 + kc == k
            for p in range(pa, pb):
                rows = min(ROWS, m - p * ROWS)
                wp = wa + f * np.uint64(p * k * ROWS + k0 * ROWS)
                bp = ba + f * np.uint64(p * ROWS)
                cp = ca + f * np.uint64(p * ROWS * ldc)
                xp = xa + f * np.uint64(k0 * ldx)
                for j in range(b0, s16, 16):
                    _tile16(kc, wp, xp + f * np.uint64(j), ldx, cp + f * np.uint64(j), ldc, bp, first, rows)
                for j in range(s16, s8, 8):
                    _tile8(kc, wp, xp + f * np.uint64(j), ldx, cp + f * np.uint64(j), ldc, bp, first, rows)
                for j in range(s8, b1):
                    _column(kc, wp, xp + f * np.uint64(j), ldx, cp + f * np.uint64(j), ldc, bp, first, rows)
                if last and code != 0:
                    for r in range(p * ROWS, p * ROWS + rows):
                        act_span(of, r * ldc + b0, r * ldc + b1, code, p0, p1)


@njit(types.void(ro(1), ro(1), ro(2), rw(2), i8, i8, i8, i8, f8, f8, i8, types.boolean),
      nogil=True, cache=True, parallel=True, error_model="numpy")
def team_gemm(panels, bias, x, out, k, m, nc, code, p0, p1, ways, by_columns):
    """:func:`gemm` over the whole output in one team region: ``ways`` bands of columns
    (multiples of 16) with ``by_columns``, else of panels."""
    n = x.shape[1]
    count = -(-m // ROWS)
    strips = -(-n // 16)
    for j in prange(ways):
        if by_columns:
            s0, s1 = strips * j // ways, strips * (j + 1) // ways
            if s1 > s0:
                gemm(panels, bias, x, out, k, m, nc, code, p0, p1, 0, count, 16 * s0, min(n, 16 * s1))
        else:
            q0, q1 = count * j // ways, count * (j + 1) // ways
            if q1 > q0:
                gemm(panels, bias, x, out, k, m, nc, code, p0, p1, q0, q1, 0, n)
