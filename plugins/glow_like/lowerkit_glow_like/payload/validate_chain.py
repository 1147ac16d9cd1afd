"""Validation of a decoded ``glow.chain`` instruction: its register program may only read
registers already written and inputs that exist, and every operand broadcasts to the output.

The compiled kernel indexes its registers and inputs with the program's numbers unchecked,
so a hostile payload must be refused here (see ``validate.py``). Failures raise ``ShapeError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lowerkit.backend.cpu.jit.activation import NAMES as ACT_CODES
from lowerkit.ir import TensorType
from lowerkit.opset import ShapeError

from ..kernels.jit_codes import ACT, BINARY, MAX_INPUTS, UNARY

__all__ = ["check_chain"]

_LOAD = BINARY["load"]
_TWO_OPERANDS = frozenset(BINARY.values()) - {_LOAD}
_ONE_OPERAND = frozenset(UNARY.values()) | {ACT + code for code in ACT_CODES.values()}


def check_chain(inputs: Sequence[TensorType], attrs: Mapping[str, object], outputs: Sequence[TensorType]) -> dict:
    """The chain's attributes, normalized, or ``ShapeError`` naming what is wrong."""
    op = "glow.chain"
    if len(outputs) != 1 or not 1 <= len(inputs) <= MAX_INPUTS:
        raise ShapeError(f"{op}: takes 1..{MAX_INPUTS} inputs and 1 output, got {len(inputs)} and {len(outputs)}")
    out = outputs[0]
    for i, t in enumerate(list(inputs) + [out]):
        if t.dtype != "f32":
            raise ShapeError(f"{op}: runs float32 only, operand {i} is {t}")
    for i, t in enumerate(inputs):
        if len(t.shape) > len(out.shape) or any(
            d not in (1, o) for d, o in zip(reversed(t.shape), reversed(out.shape))
        ):
            raise ShapeError(f"{op}: input {i} {t} does not broadcast to the output {out}")
    code, params = attrs.get("code"), attrs.get("params")
    if not isinstance(code, (tuple, list)) or not code or len(code) % 4:
        raise ShapeError(f"{op}: code must be a non-empty sequence of (op, dst, a, b) quads")
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in code):
        raise ShapeError(f"{op}: code must hold integers")
    steps = len(code) // 4
    if not isinstance(params, (tuple, list)) or len(params) != 2 * steps:
        raise ShapeError(f"{op}: params must hold two numbers per instruction ({2 * steps})")
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in params):
        raise ShapeError(f"{op}: params must hold numbers")
    for i in range(steps):
        kind, dst, a, b = code[4 * i : 4 * i + 4]
        if dst != i:
            raise ShapeError(f"{op}: instruction {i} must write register {i}, writes {dst}")
        if kind == _LOAD:
            ok = 0 <= a < len(inputs)
        elif kind in _TWO_OPERANDS:
            ok = 0 <= a < i and 0 <= b < i
        elif kind in _ONE_OPERAND:
            ok = 0 <= a < i
        else:
            raise ShapeError(f"{op}: instruction {i} has unknown opcode {kind}")
        if not ok:
            raise ShapeError(f"{op}: instruction {i} reads a register or input that does not exist")
    ops = attrs.get("ops", "")
    if not isinstance(ops, str):
        raise ShapeError(f"{op}: ops must be a string")
    return {"code": tuple(code), "params": tuple(float(p) for p in params), "ops": ops}
