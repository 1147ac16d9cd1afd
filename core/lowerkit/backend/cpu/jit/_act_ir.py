"""The fused activations in LLVM IR, on float vectors (8 or 16 lanes) still in registers: the
epilogue of the IR micro-kernels (:mod:`.panel`), op for op the arithmetic of :mod:`._act`'s numba
versions (the same ``fmuladd`` steps of ``exp32``, the same divisions), so a value comes out
the same whichever runs it.

Why: the panel GEMM ran its activation as a pass over each finished tile row of 64-128
columns, and a short loop per row costs its start and its exit's mispredicted branch each
time — SiLU fused that way took 0.72 ns a value against 0.52 for a separate pass over a
whole 96x12544 output (one thread, AMD EPYC), and ReLU +100 µs where it should cost nothing.
"""

from __future__ import annotations

from llvmlite import ir

from ._act import _LN2_HI, _LN2_LO, _LOG2E, _ROUND, EXP_POLY
from ._simd import _F32, _I32, broadcast, fmuladd
# IR_CODES (the codes with an IR form) lives in .activation, plain Python; re-exported here.
from .activation import CLIP, HARDSIGMOID, HARDSWISH, IR_CODES, RELU, SIGMOID, SILU  # noqa: F401


def _splat(value: float, like) -> ir.Constant:
    """``value`` in every lane of a vector typed like ``like``."""
    return ir.Constant(like.type, [float(value)] * like.type.count)


def _max(builder, a, b):  # numba's max(a, b) on floats: a unless b is greater
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


def _min(builder, a, b):
    return builder.select(builder.fcmp_ordered("<", b, a), b, a)


def _exp(builder, x):
    """``_act.exp32`` on a vector."""
    x = _min(builder, _max(builder, x, _splat(-87.3, x)), _splat(88.7, x))
    t = fmuladd(builder, x, _splat(_LOG2E, x), _splat(_ROUND, x))
    n = builder.fsub(t, _splat(_ROUND, x))
    r = fmuladd(builder, n, _splat(-_LN2_HI, x), x)
    r = fmuladd(builder, n, _splat(-_LN2_LO, x), r)
    p = _splat(EXP_POLY[0], x)
    for c in EXP_POLY[1:]:
        p = fmuladd(builder, p, r, _splat(c, x))
    ints = ir.VectorType(_I32, x.type.count)
    bits = builder.shl(builder.bitcast(t, ints), ir.Constant(ints, [23] * x.type.count))
    return builder.fmul(p, builder.bitcast(bits, x.type))


def _one(builder, code: int, v, p0, p1):
    zero, one = _splat(0.0, v), _splat(1.0, v)
    if code == RELU:
        return builder.fadd(_max(builder, v, zero), zero)
    if code == CLIP:
        return _min(builder, _max(builder, v, p0), p1)
    if code == HARDSWISH:
        gate = _min(builder, _max(builder, builder.fadd(v, _splat(3.0, v)), zero), _splat(6.0, v))
        return builder.fdiv(builder.fmul(v, gate), _splat(6.0, v))
    if code == HARDSIGMOID:
        return _min(builder, _max(builder, fmuladd(builder, p0, v, p1), zero), one)
    if code == SILU:
        return builder.fdiv(v, builder.fadd(one, _exp(builder, builder.fneg(v))))
    if code == SIGMOID:
        return builder.fdiv(one, builder.fadd(one, _exp(builder, builder.fneg(v))))
    raise ValueError(f"activation code {code} has no IR form")


def activate(builder, code, p0, p1, values: list) -> list:
    """``values`` (float vectors, of 8 or 16 lanes) through activation ``code`` (an i64: one of
    :data:`IR_CODES`, or anything else for none) with parameters ``p0``, ``p1`` (doubles,
    used by clip and hardsigmoid)."""
    scalars = [builder.fptrunc(p, _F32) for p in (p0, p1)]
    params = {}  # lanes -> (p0, p1) broadcast, built in the entry block
    for v in values:
        lanes = v.type.count
        if lanes not in params:
            params[lanes] = [broadcast(builder, s, lanes) for s in scalars]
    entry = builder.block
    done = builder.append_basic_block("act.done")
    switch = builder.switch(code, done)
    results = []
    for c in IR_CODES:
        case = builder.append_basic_block(f"act.{c}")
        switch.add_case(ir.Constant(code.type, c), case)
        builder.position_at_end(case)
        results.append((builder.block, [_one(builder, c, v, *params[v.type.count]) for v in values]))
        builder.branch(done)
    builder.position_at_end(done)
    out = []
    for i, v in enumerate(values):
        phi = builder.phi(v.type)
        phi.add_incoming(v, entry)
        for block, computed in results:
            phi.add_incoming(computed[i], block)
        out.append(phi)
    return out
