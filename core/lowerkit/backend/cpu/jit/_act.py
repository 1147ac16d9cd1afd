"""The activations as numba functions (codes from :mod:`.activation`); imports numba."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

_SQRT_HALF = np.float32(1 / math.sqrt(2))
_TANH_K = np.float32(math.sqrt(2 / math.pi))
_ZERO, _ONE, _HALF, _THREE, _SIX = (np.float32(v) for v in (0, 1, 0.5, 3, 6))


@intrinsic
def _as_float32(typingctx, bits):
    """Reinterpret an int32 as float32 (a bit cast LLVM can vectorise)."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def _muladd(typingctx, a, b, c):
    """``a * b + c`` in float32 as LLVM's ``fmuladd``: one fused instruction where the CPU
    has FMA, a multiply and an add where it has not. Explicit, because an inlined helper is
    compiled with its caller's flags, and the kernels do not allow contraction everywhere."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f = ir.FloatType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f, [f, f, f]), "llvm.fmuladd.f32")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _as_int32(typingctx, value):
    """Reinterpret a float32 as int32 (the inverse of :func:`_as_float32`)."""
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


# exp(x) = 2^n * e^r, n = round(x / ln 2), |r| <= ln 2 / 2. Adding 1.5 * 2^23 rounds x / ln 2 to
# an integer in the low mantissa bits of the sum; the extra 127 makes those bits n + 127, the
# biased exponent of 2^n, so a shift by 23 builds 2^n (no floor, no float-to-int conversion).
_ROUND = np.float32(1.5 * 2**23 + 127)
_LOG2E = np.float32(1.44269504)
_LN2_HI, _LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)  # ln 2 = hi + lo (Cody-Waite)
# e^r on [-ln 2 / 2, ln 2 / 2]: a degree-6 polynomial fitted for least relative error (Lawson's
# iteration on Chebyshev nodes; 1.9e-9 in exact arithmetic), highest degree first, for Horner's
# rule (the last two coefficients round to 1 in float32).
EXP_POLY = tuple(np.float32(c) for c in (0.0013836845755577087, 0.008374815806746483, 0.04166822507977486,
                                         0.16666419804096222, 0.49999991059303284, 1.0, 1.0))


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def exp32(x):
    """exp for float32 that vectorises (libm's expf does not): x clamped to [-87.3, 88.7],
    rounded to a multiple of ln 2 by the magic-number sum, e^r by a degree-6 polynomial in fused
    multiply-adds, 2^n as exponent bits; relative error < 1e-7 (float32 rounding included).
    Before session 21 this was Cephes' form (floor, the polynomial as r + r^2 * p(r) + 1, a
    conversion to int): SiLU 0.34 -> 0.30 ns a value on the Zen 4 VM, in L1, one thread."""
    c = EXP_POLY
    x = min(max(x, np.float32(-87.3)), np.float32(88.7))
    t = _muladd(x, _LOG2E, _ROUND)
    n = t - _ROUND
    r = _muladd(n, -_LN2_HI, x)
    r = _muladd(n, -_LN2_LO, r)
    p = _muladd(c[0], r, c[1])
    p = _muladd(p, r, c[2])
    p = _muladd(p, r, c[3])
    p = _muladd(p, r, c[4])
    p = _muladd(p, r, c[5])
    p = _muladd(p, r, c[6])
    return p * _as_float32(_as_int32(t) << np.int32(23))


# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] — beyond, erf rounds to +-1 in float32 —, the rational
# approximation XLA and Eigen use for float32 (P of degree 6 and Q of degree 4 in x^2; highest
# degree first, for Horner's rule): absolute error < 5e-7 in float32, relative < 3e-7 near 0.
_ERF_P = tuple(np.float32(c) for c in (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                                       -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                                       -1.60960333262415e-02))
_ERF_Q = tuple(np.float32(c) for c in (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                                       -7.37332916720468e-03, -1.42647390514189e-02))
_ERF_CLAMP = np.float32(4)


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def erf32(x):
    """erf for float32 that vectorises (libm's erf is a scalar call, ~25x slower in a loop): a
    rational function of x clamped to [-4, 4], one division and no exp. Until session 29 this
    was a series below |x| = 0.5 and Abramowitz & Stegun 7.1.26 (with an exp) above, both
    computed and one selected: GELU over a row of 768 values (in L1, one thread, AMD EPYC
    Zen 3) took 1.24 ns a value, now 0.82."""
    p, q = _ERF_P, _ERF_Q
    c = min(max(x, -_ERF_CLAMP), _ERF_CLAMP)
    z = c * c
    num = _muladd(p[0], z, p[1])  # fused multiply-adds whatever the inlining caller's flags
    num = _muladd(num, z, p[2])
    num = _muladd(num, z, p[3])
    num = _muladd(num, z, p[4])
    num = _muladd(num, z, p[5])
    num = _muladd(num, z, p[6])
    den = _muladd(q[0], z, q[1])
    den = _muladd(den, z, q[2])
    den = _muladd(den, z, q[3])
    den = _muladd(den, z, q[4])
    e = c * num / den
    return e if x == x else x  # nan stays nan (the clamp would have made it -4)


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def gelu32(v):
    """GELU, 0.5 v (1 + erf(v / sqrt 2))."""
    return _HALF * v * (_ONE + erf32(v * _SQRT_HALF))


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def gelu_tanh32(v):
    """GELU's tanh form, 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))), with
    tanh(z) = 1 - 2 / (exp(2z) + 1)."""
    z = _TANH_K * (v + np.float32(0.044715) * v * v * v)
    return _HALF * v * (_ONE + (_ONE - np.float32(2) / (exp32(np.float32(2) * z) + _ONE)))


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def act(v, code, p0, p1):
    """One value through activation ``code`` (branchy: for short loops and epilogues)."""
    if code == 0:
        return v
    if code == 1:
        return max(v, _ZERO)
    if code == 2:
        return min(max(v, np.float32(p0)), np.float32(p1))
    if code == 3:
        return v * min(max(v + _THREE, _ZERO), _SIX) / _SIX
    if code == 4:  # one fused multiply-add whatever the caller's flags (as jit._act_ir's)
        return min(max(_muladd(np.float32(p0), v, np.float32(p1)), _ZERO), _ONE)
    if code == 5:
        return v / (_ONE + exp32(-v))
    if code == 6:
        return gelu32(v)
    if code == 7:
        return gelu_tanh32(v)
    return _ONE / (_ONE + exp32(-v))


@njit(inline="always", nogil=True, cache=True, error_model="numpy")
def act_span(a, lo, hi, code, p0, p1):
    """``a[lo:hi] = act(a[lo:hi])`` in place; the branch is outside the loops, and the loops
    index a slice from 0 (no negative-index checks), so they vectorise."""
    if code == 0:
        return
    s = a[lo:hi]
    n = s.shape[0]
    if code == 1:
        # "+ 0" keeps every store: for max(s[i], 0) alone LLVM stores only the lanes that
        # change, as masked stores (vmaskmovps), which AMD's Zen cores run ~10x slower than a
        # plain vector store (1.2M floats: 0.58 -> 0.06-0.10 ms on a Zen 3). The add costs
        # nothing in a memory-bound loop and changes no value (-0.0 becomes +0.0).
        for i in range(n):
            s[i] = max(s[i], _ZERO) + _ZERO
    elif code == 2:
        f0, f1 = np.float32(p0), np.float32(p1)
        for i in range(n):
            s[i] = min(max(s[i], f0), f1)
    elif code == 3:
        for i in range(n):
            v = s[i]
            s[i] = v * min(max(v + _THREE, _ZERO), _SIX) / _SIX
    elif code == 5:
        for i in range(n):
            v = s[i]
            s[i] = v / (_ONE + exp32(-v))
    elif code == 6:  # GELUs in loops of their own, as SiLU's (not through act())
        for i in range(n):
            s[i] = gelu32(s[i])
    elif code == 7:
        for i in range(n):
            s[i] = gelu_tanh32(s[i])
    elif code == 8:
        for i in range(n):
            s[i] = _ONE / (_ONE + exp32(-s[i]))
    else:
        for i in range(n):
            s[i] = act(s[i], code, p0, p1)
