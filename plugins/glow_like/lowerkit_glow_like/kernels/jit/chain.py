"""A fused element-wise chain as one compiled pass over memory.

The chain is a tiny register program (see ``lowerkit_glow_like.kernels.chain`` for the
opcodes): LOAD an input into a register, apply binary and unary ops register to register,
and the last instruction's register is stored to the output. It runs over the output in
blocks of :data:`BLOCK` elements along the innermost (compressed) dimension: each op is a
short vectorised loop over a block that stays in L1, so every input is read once and the
output written once, however long the chain.

Iteration space: the output as [d0, d1, d2, d3] after merging adjacent dimensions that are
contiguous for every operand; each input has element strides over it (0 where it
broadcasts). Workers take ranges ``[first, last)`` of the d0*d1*d2 outer rows.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from lowerkit.backend.cpu.jit._act import act_span, erf32
from lowerkit.backend.cpu.jit._types import f8, i8, ro, rw

from ..jit_codes import ACT, BINARY, MAX_INPUTS, UNARY

BLOCK = 256  # elements per register block
LOAD, ADD, SUB, MUL, DIV, MAX, MIN = (BINARY[k] for k in ("load", "add", "sub", "mul", "div", "maximum", "minimum"))
NEG, EXP, LOG, SQRT, TANH, ERF, LEAKY = (UNARY[k] for k in ("neg", "exp", "log", "sqrt", "tanh", "erf", "leaky_relu"))


def _sig(k: int):
    return types.void(types.UniTuple(ro(1), k), types.Array(i8, 2, "C", readonly=True),
                      types.Array(i8, 1, "C", readonly=True), rw(1), types.Array(i8, 2, "C", readonly=True),
                      types.Array(f8, 2, "C", readonly=True), rw(2), i8, i8)


@njit(inline="always", error_model="numpy")
def _load(src, dst, base, stride, n):
    if stride == 1:
        s = src[base:base + n]
        for t in range(n):
            dst[t] = s[t]
    elif stride == 0:
        v = src[base]
        for t in range(n):
            dst[t] = v
    else:
        s = src[base:]
        for t in range(n):
            dst[t] = s[t * stride]


@njit(inline="always", error_model="numpy")
def _binary(op, a, b, d, n):
    if op == ADD:
        for t in range(n):
            d[t] = a[t] + b[t]
    elif op == SUB:
        for t in range(n):
            d[t] = a[t] - b[t]
    elif op == MUL:
        for t in range(n):
            d[t] = a[t] * b[t]
    elif op == DIV:
        for t in range(n):
            d[t] = a[t] / b[t]
    elif op == MAX:
        for t in range(n):
            d[t] = max(a[t], b[t])
    else:
        for t in range(n):
            d[t] = min(a[t], b[t])


@njit(inline="always", error_model="numpy")
def _unary(op, a, d, n, p0, p1):
    if op >= ACT and op < NEG:
        for t in range(n):
            d[t] = a[t]
        act_span(d, 0, n, op - ACT, p0, p1)
    elif op == NEG:
        for t in range(n):
            d[t] = -a[t]
    elif op == EXP:
        for t in range(n):
            d[t] = np.float32(math.exp(a[t]))
    elif op == LOG:
        for t in range(n):
            d[t] = np.float32(math.log(a[t])) if a[t] > 0 else (np.float32(-np.inf) if a[t] == 0 else np.float32(np.nan))
    elif op == SQRT:
        for t in range(n):
            d[t] = np.float32(math.sqrt(a[t])) if a[t] >= 0 else np.float32(np.nan)
    elif op == TANH:
        for t in range(n):
            d[t] = np.float32(math.tanh(a[t]))
    elif op == ERF:
        for t in range(n):
            d[t] = erf32(a[t])
    else:  # LEAKY
        slope = np.float32(p0)
        for t in range(n):
            d[t] = a[t] if a[t] >= 0 else a[t] * slope


def _chain(ins, strides, shape, out, code, params, regs, first, last):
    """Run the program ``code`` [m, 4] (op, dst, a, b) over outer rows [first, last)."""
    d1, d2, d3 = shape[1], shape[2], shape[3]
    m = code.shape[0]
    result = code[m - 1, 1]
    for o in range(first, last):
        i0 = o // (d1 * d2)
        i1 = (o // d2) % d1
        i2 = o % d2
        for j0 in range(0, d3, BLOCK):
            n = min(BLOCK, d3 - j0)
            for q in range(m):
                op, dst, a, b = code[q, 0], code[q, 1], code[q, 2], code[q, 3]
                d = regs[dst, :n]
                if op == LOAD:
                    s = strides[a]
                    base = i0 * s[0] + i1 * s[1] + i2 * s[2] + j0 * s[3]
                    _load(ins[a], d, base, s[3], n)
                elif op >= ACT:
                    _unary(op, regs[a, :n], d, n, params[q, 0], params[q, 1])
                else:
                    _binary(op, regs[a, :n], regs[b, :n], d, n)
            r = regs[result, :n]
            dst_out = out[o * d3 + j0:o * d3 + j0 + n]
            for t in range(n):
                dst_out[t] = r[t]


# One signature (always MAX_INPUTS inputs; the caller pads with a dummy): a quarter of the
# compile time of one specialisation per input count.
chain = njit(_sig(MAX_INPUTS), nogil=True, cache=True, error_model="numpy")(_chain)
