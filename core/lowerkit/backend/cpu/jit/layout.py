"""Layout moves: the transpose of the last two axes of a stack of matrices, in 8 x 8 blocks.

A ConvNeXt block turns its map channels-last and back around the layer norm and the MLP
(``permute(0, 2, 3, 1)``, ``permute(0, 3, 1, 2)``): as numpy's copy of a transposed view
the channels-last copy reads its source a float at a time, one plane apart, and those two
moves took 6% of ConvNeXt-T's time at batch 8 (glow_like, 36 of 571 thread-ms). Here 8 rows
of 8 floats are loaded as 8 vectors, turned in registers (``_simd.transpose8``: 24
shuffles) and stored as 8 vectors: every load and store a whole 32-byte run.

- :func:`transpose_last` — ``out[n] = x[n].T`` for matrices [first, last) of a stack.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from ._simd import _I64, _V8, transpose8
from ._types import i8, ro, rw

_U64 = types.uint64


@intrinsic
def _block8(typingctx, src, src_row_bytes, dst, dst_row_bytes):
    """The 8 x 8 floats at address ``src`` (rows ``src_row_bytes`` apart), transposed, at
    ``dst`` (rows ``dst_row_bytes`` apart)."""
    sig = types.void(_U64, _U64, _U64, _U64)

    def codegen(context, builder, signature, args):
        src_, src_stride, dst_, dst_stride = args
        vptr = _V8.as_pointer()
        rows = []
        for i in range(8):
            address = builder.add(src_, builder.mul(ir.Constant(_I64, i), src_stride))
            rows.append(builder.load(builder.inttoptr(address, vptr), align=4))
        for j, column in enumerate(transpose8(builder, rows)):
            address = builder.add(dst_, builder.mul(ir.Constant(_I64, j), dst_stride))
            builder.store(column, builder.inttoptr(address, vptr), align=4)
        return context.get_dummy_value()

    return sig, codegen


TILE = 64  # rows and columns of a tile of blocks: its source and destination (16 KB each) stay in L1


@njit(types.void(ro(3), rw(3), i8, i8), nogil=True, cache=True, error_model="numpy")
def transpose_last(x, out, first, last):
    """``out[n] = x[n].T`` for n in [first, last): ``x`` [N, A, B], ``out`` [N, B, A] (C order,
    float32). Tiles of :data:`TILE` x :data:`TILE`, of whole 8 x 8 blocks turned in
    registers; the rows and columns past the last whole block one float at a time. (Block by
    block along whole rows, the destination's lines were half written and left L1 before
    their other half came: 96 x 3136 matrices 1.15x numpy's time; tiled 0.6x.)"""
    a_n, b_n = x.shape[1], x.shape[2]
    a8, b8 = a_n // 8 * 8, b_n // 8 * 8
    u4 = np.uint64(4)
    xa, oa = np.uint64(x.ctypes.data), np.uint64(out.ctypes.data)
    x_row, o_row = u4 * np.uint64(b_n), u4 * np.uint64(a_n)
    for n in range(first, last):
        src, dst = xa + u4 * np.uint64(n * a_n * b_n), oa + u4 * np.uint64(n * b_n * a_n)
        for a1 in range(0, a8, TILE):
            for b1 in range(0, b8, TILE):
                for a0 in range(a1, min(a1 + TILE, a8), 8):
                    for b0 in range(b1, min(b1 + TILE, b8), 8):
                        _block8(src + x_row * np.uint64(a0) + u4 * np.uint64(b0), x_row,
                                dst + o_row * np.uint64(b0) + u4 * np.uint64(a0), o_row)
        for a in range(a8):  # the columns past the last whole block
            for b in range(b8, b_n):
                out[n, b, a] = x[n, a, b]
        for a in range(a8, a_n):  # the rows past it
            for b in range(b_n):
                out[n, b, a] = x[n, a, b]
