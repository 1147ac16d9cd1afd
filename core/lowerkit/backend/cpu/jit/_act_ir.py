"""The fused activations in LLVM IR, on 8-float vectors still in registers: the epilogue of
the IR micro-kernels (:mod:`.panel`), op for op the arithmetic of :mod:`._act`'s numba
versions (the same ``fmuladd`` steps of ``exp32``, the same divisions), so a value comes out
the same whichever runs it.

Why: the panel GEMM ran its activation as a pass over each finished tile row of 64-128
columns, and a short loop per row costs its start and its exit's mispredicted branch each
time — SiLU fused that way took 0.72 ns a value against 0.52 for a separate pass over a
whole 96x12544 output (one thread, AMD EPYC), and ReLU +100 µs where it should cost nothing.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

from ._act import _LN2_HI, _LN2_LO, _LOG2E, _ROUND, EXP_POLY
from ._simd import _F32, _I32, _V8, broadcast8, fmuladd8
from .activation import CLIP, HARDSIGMOID, HARDSWISH, RELU, SIGMOID, SILU

# Codes with an IR form; the others (the GELUs, with erf or tanh) stay on ``act_span``.
IR_CODES = (RELU, CLIP, HARDSWISH, HARDSIGMOID, SILU, SIGMOID)

_V8I = ir.VectorType(_I32, 8)


def _splat(value: float) -> ir.Constant:
    return ir.Constant(_V8, [float(value)] * 8)


def _call(builder, name: str, args):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8, [_V8] * len(args)), name)
    return builder.call(fn, args)


def _max(builder, a, b):  # numba's max(a, b) on floats: a unless b is greater
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


def _min(builder, a, b):
    return builder.select(builder.fcmp_ordered("<", b, a), b, a)


def _exp(builder, x):
    """``_act.exp32`` on a vector."""
    x = _min(builder, _max(builder, x, _splat(-87.3)), _splat(88.7))
    t = fmuladd8(builder, x, _splat(_LOG2E), _splat(_ROUND))
    n = builder.fsub(t, _splat(_ROUND))
    r = fmuladd8(builder, n, _splat(-_LN2_HI), x)
    r = fmuladd8(builder, n, _splat(-_LN2_LO), r)
    p = _splat(EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = fmuladd8(builder, p, r, _splat(c))
    bits = builder.shl(builder.bitcast(t, _V8I), ir.Constant(_V8I, [23] * 8))
    return builder.fmul(p, builder.bitcast(bits, _V8))


def _one(builder, code: int, v, p0, p1):
    zero, one = _splat(0.0), _splat(1.0)
    if code == RELU:
        return builder.fadd(_max(builder, v, zero), zero)
    if code == CLIP:
        return _min(builder, _max(builder, v, p0), p1)
    if code == HARDSWISH:
        gate = _min(builder, _max(builder, builder.fadd(v, _splat(3.0)), zero), _splat(6.0))
        return builder.fdiv(builder.fmul(v, gate), _splat(6.0))
    if code == HARDSIGMOID:
        return _min(builder, _max(builder, fmuladd8(builder, p0, v, p1), zero), one)
    if code == SILU:
        return builder.fdiv(v, builder.fadd(one, _exp(builder, builder.fneg(v))))
    if code == SIGMOID:
        return builder.fdiv(one, builder.fadd(one, _exp(builder, builder.fneg(v))))
    raise ValueError(f"activation code {code} has no IR form")


def activate(builder, code, p0, p1, values: list) -> list:
    """``values`` (8-float vectors) through activation ``code`` (an i64: one of
    :data:`IR_CODES`, or anything else for none) with parameters ``p0``, ``p1`` (doubles,
    used by clip and hardsigmoid)."""
    f0, f1 = (broadcast8(builder, builder.fptrunc(p, _F32)) for p in (p0, p1))
    entry = builder.block
    done = builder.append_basic_block("act.done")
    switch = builder.switch(code, done)
    results = []
    for c in IR_CODES:
        case = builder.append_basic_block(f"act.{c}")
        switch.add_case(ir.Constant(code.type, c), case)
        builder.position_at_end(case)
        results.append((builder.block, [_one(builder, c, v, f0, f1) for v in values]))
        builder.branch(done)
    builder.position_at_end(done)
    out = []
    for i, v in enumerate(values):
        phi = builder.phi(_V8)
        phi.add_incoming(v, entry)
        for block, computed in results:
            phi.add_incoming(computed[i], block)
        out.append(phi)
    return out

