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


_TWO_RSQRT_PI = 2 / math.sqrt(math.pi)
# erf's Maclaurin series x * (2/sqrt(pi)) * (1 - x^2/3 + x^4/10 - x^6/42 + x^8/216 - x^10/1320),
# and Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7): 1 - t * P(t) * exp(-x^2), t = 1/(1 + p|x|).
_ERF_SERIES = tuple(np.float32(_TWO_RSQRT_PI * c) for c in (1, -1 / 3, 1 / 10, -1 / 42, 1 / 216, -1 / 1320))
_ERF_P = np.float32(0.3275911)
_ERF_A = tuple(np.float32(c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


@njit(inline="always", nogil=True, cache=True, error_model="numpy", fastmath={"contract"})
def erf32(x):
    """erf for float32 that vectorises (libm's erf is a scalar call, ~25x slower in a loop):
    the series below |x| = 0.5 (relative error < 5e-7), Abramowitz & Stegun 7.1.26 above
    (absolute error < 3e-7 in float32); both are computed and one selected."""
    s, a = _ERF_SERIES, _ERF_A
    z = x * x
    small = x * (s[0] + z * (s[1] + z * (s[2] + z * (s[3] + z * (s[4] + z * s[5])))))
    ax = abs(x)
    t = _ONE / (_ONE + _ERF_P * ax)
    y = _ONE - t * (a[0] + t * (a[1] + t * (a[2] + t * (a[3] + t * a[4])))) * exp32(-z)
    large = y if x >= _ZERO else -y
    return small if ax < _HALF else large


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
        return _HALF * v * (_ONE + erf32(v * _SQRT_HALF))
    if code == 7:  # tanh(z) = 1 - 2 / (exp(2z) + 1)
        z = _TANH_K * (v + np.float32(0.044715) * v * v * v)
        return _HALF * v * (_ONE + (_ONE - np.float32(2) / (exp32(np.float32(2) * z) + _ONE)))
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
    elif code == 8:
        for i in range(n):
            s[i] = _ONE / (_ONE + exp32(-s[i]))
    else:
        for i in range(n):
            s[i] = act(s[i], code, p0, p1)
