"""Vector helpers LLVM's loop vectoriser does not emit from plain loops (numba intrinsics),
and the LLVM IR builders the vector kernels share (:func:`fmuladd`, :func:`broadcast`,
:func:`masked`, :func:`transpose8`, :func:`allow_512_bit`; used by :mod:`.panel`,
:mod:`.dwblock`, :mod:`.dwrows`, :mod:`.layout`, :mod:`._act_ir`).

:func:`split_pairs` deinterleaves a run of float pairs into its even and odd elements — the
column phases of a stride-2 convolution. Written as a loop (``even[j] = x[2j]; odd[j] =
x[2j + 1]``) LLVM left it scalar here: a MobileNetV2 144x56x56 stride-2 depthwise layer
spent 152 of its 213 µs (one thread) splitting its planes. Two 8-float loads and two
shuffles per 8 pairs instead (``vshufps`` / ``vpermpd`` on AVX2). :func:`split_quads` does
the same in two rounds for four phases (Winograd's tile columns, 4 floats apart).
:func:`take_evens` keeps only the even ones (a stride-2 im2col row): as a loop LLVM emitted
gathers, and the im2col of a 1x1/2 layer (256x56x56, four images) took 1.0 ms against
numpy's strided copy's 0.34.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

_F32 = ir.FloatType()  # shared with jit.panel's micro-kernels
_V8 = ir.VectorType(_F32, 8)
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_EVEN = ir.Constant(ir.VectorType(_I32, 8), list(range(0, 16, 2)))
_ODD = ir.Constant(ir.VectorType(_I32, 8), list(range(1, 16, 2)))
_U1, _U2, _U4, _U8, _U16 = np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(8), np.uint64(16)
_U = np.uint64


def vector(lanes: int) -> ir.VectorType:
    """LLVM's vector of ``lanes`` floats (8: a ymm register; 16: a zmm register, see
    :func:`allow_512_bit`)."""
    return ir.VectorType(_F32, lanes)


def fmuladd(builder, a, b, c):
    """``a * b + c`` on float vectors as LLVM's ``fmuladd`` (one FMA where the CPU has FMA)."""
    lanes = a.type.count
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3),
                                        f"llvm.fmuladd.v{lanes}f32")
    return builder.call(fn, [a, b, c])


def const(value: int) -> ir.Constant:
    """An i64 constant."""
    return ir.Constant(_I64, value)


def masked(builder, name: str, ret, args, lanes: int):
    """Call ``llvm.masked.<name>.v<lanes>f32.p0`` — ``load`` or ``store`` (AVX: ``vmaskmovps``;
    AVX-512: a move under a mask register; elsewhere lane by lane)."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]),
                                        f"llvm.masked.{name}.v{lanes}f32.p0")
    return builder.call(fn, args)


_UNPACK_LO = [0, 8, 1, 9, 4, 12, 5, 13]
_UNPACK_HI = [2, 10, 3, 11, 6, 14, 7, 15]
_PAIR_LO = [0, 1, 8, 9, 4, 5, 12, 13]
_PAIR_HI = [2, 3, 10, 11, 6, 7, 14, 15]
_HALF_LO = [0, 1, 2, 3, 8, 9, 10, 11]
_HALF_HI = [4, 5, 6, 7, 12, 13, 14, 15]


def _lanes(indices):
    return ir.Constant(ir.VectorType(_I32, 8), indices)


def transpose8(builder, rows):
    """8 vectors of 8 floats (rows) -> their 8 columns: unpack pairs, pair quads, swap 128-bit
    halves (``vunpck*ps``, ``vshufps``, ``vperm2f128`` on AVX)."""
    sh = builder.shuffle_vector
    t = []
    for i in range(0, 8, 2):
        t += [sh(rows[i], rows[i + 1], _lanes(_UNPACK_LO)), sh(rows[i], rows[i + 1], _lanes(_UNPACK_HI))]
    q = []
    for i in (0, 4):  # t0..t3 hold rows 0-3, t4..t7 rows 4-7
        q += [sh(t[i], t[i + 2], _lanes(_PAIR_LO)), sh(t[i], t[i + 2], _lanes(_PAIR_HI)),
              sh(t[i + 1], t[i + 3], _lanes(_PAIR_LO)), sh(t[i + 1], t[i + 3], _lanes(_PAIR_HI))]
    return ([sh(q[i], q[i + 4], _lanes(_HALF_LO)) for i in range(4)]
            + [sh(q[i], q[i + 4], _lanes(_HALF_HI)) for i in range(4)])


def broadcast(builder, scalar, lanes: int = 8):
    """A vector of ``lanes`` values with ``scalar`` (a float, or any scalar type) in every lane."""
    vt = ir.VectorType(scalar.type, lanes)
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), scalar, ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), zeros)


# LLVM splits 512-bit vectors into two 256-bit halves on CPUs it tunes for 256-bit code
# (Intel's AVX-512 server cores among them) unless a function asks for them: this attribute.
_WIDE_ATTRIBUTE = '"min-legal-vector-width"="512"'


def allow_512_bit(builder) -> None:
    """Let the function being built keep 16-float vectors in zmm registers. (llvmlite's
    attribute set accepts only keyword attributes; LLVM parses this string one where the set
    prints it, after the parameters.) Inlining passes it on: LLVM keeps the larger width."""
    set.add(builder.function.attributes, _WIDE_ATTRIBUTE)


def _load16(builder, address):
    """The 16 floats at integer ``address`` as two 8-float vectors (unaligned loads)."""
    s = builder.inttoptr(address, _V8.as_pointer())
    return builder.load(s, align=4), builder.load(builder.gep(s, [ir.Constant(_I64, 1)]), align=4)


def _store8(builder, vector, address):
    """Store an 8-float vector at integer ``address`` (unaligned)."""
    builder.store(vector, builder.inttoptr(address, _V8.as_pointer()), align=4)


@intrinsic
def _split8(typingctx, src, even, odd):
    """16 floats at address ``src`` -> the 8 even ones at ``even``, the 8 odd ones at ``odd``
    (unaligned; addresses as integers)."""
    sig = types.void(types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        lo, hi = _load16(builder, args[0])
        _store8(builder, builder.shuffle_vector(lo, hi, _EVEN), args[1])
        _store8(builder, builder.shuffle_vector(lo, hi, _ODD), args[2])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def split_quads(typingctx, src, p0, p1, p2, p3):
    """32 floats at address ``src`` -> their four phases (elements ``4 j + p``, 8 each) at
    addresses ``p0`` .. ``p3`` (unaligned; integer addresses): two rounds of even/odd shuffles.
    The columns of Winograd F(4x4, 3x3) tiles, which start every 4 floats
    (``jit.winograd.winograd_input``)."""
    sig = types.void(types.uint64, types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        a, b = _load16(builder, args[0])
        c, d = _load16(builder, builder.add(args[0], ir.Constant(_I64, 64)))
        even_ab, odd_ab = builder.shuffle_vector(a, b, _EVEN), builder.shuffle_vector(a, b, _ODD)
        even_cd, odd_cd = builder.shuffle_vector(c, d, _EVEN), builder.shuffle_vector(c, d, _ODD)
        _store8(builder, builder.shuffle_vector(even_ab, even_cd, _EVEN), args[1])
        _store8(builder, builder.shuffle_vector(odd_ab, odd_cd, _EVEN), args[2])
        _store8(builder, builder.shuffle_vector(even_ab, even_cd, _ODD), args[3])
        _store8(builder, builder.shuffle_vector(odd_ab, odd_cd, _ODD), args[4])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _evens8(typingctx, src, dst):
    """The 8 even floats of the 16 at address ``src`` -> ``dst`` (unaligned; integer addresses)."""
    sig = types.void(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        lo, hi = _load16(builder, args[0])
        _store8(builder, builder.shuffle_vector(lo, hi, _EVEN), args[1])
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def take_evens(xf, xa, start, dst, da, d0, count):
    """``dst[d0 + j] = xf[start + 2j]`` for j < ``count`` (flat float32 arrays and their
    addresses, indices ``np.uint64`` as in :func:`split_pairs`): the columns of a stride-2
    im2col row. The vectors read 16 floats at a time and stop before the last even one's
    neighbour, which may lie past the array; the rest go one by one."""
    vectors = (_U2 * count - _U1) // _U16 if count > 0 else _U(0)
    for v in range(vectors):
        j = v * _U8
        _evens8(xa + _U4 * (start + _U2 * j), da + _U4 * (d0 + j))
    for j in range(vectors * _U8, count):
        dst[d0 + j] = xf[start + _U2 * j]


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def split_pairs(xf, xa, start, even, ea, e0, odd, oa, o0, count):
    """``even[e0 + j] = xf[start + 2j]`` and ``odd[o0 + j] = xf[start + 2j + 1]`` for j <
    ``count`` (flat float32 arrays and their addresses ``xa``, ``ea``, ``oa`` — taken once per
    kernel call; indices unsigned (``np.uint64``: mixed with signed ones numba computes in
    floats), all in bounds)."""
    vectors = count // _U8
    for v in range(vectors):
        j = v * _U8
        _split8(xa + _U4 * (start + _U2 * j), ea + _U4 * (e0 + j), oa + _U4 * (o0 + j))
    for j in range(vectors * _U8, count):
        even[e0 + j] = xf[start + _U2 * j]
        odd[o0 + j] = xf[start + _U2 * j + _U1]
