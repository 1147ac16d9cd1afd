"""Fused activations of the compiled kernels: one integer code and two parameters each.

Plain Python (no numba): plugins translate their fusion attributes with
:func:`activation_code` while building programs, without compiling anything.
"""

from __future__ import annotations

NONE, RELU, CLIP, HARDSWISH, HARDSIGMOID, SILU, GELU, GELU_TANH, SIGMOID = range(9)
# The codes the kernels apply to their accumulators in registers (an LLVM IR form, ``._act_ir``);
# the others (the GELUs, with erf or tanh) run after, on ``._act.act_span``.
IR_CODES = (RELU, CLIP, HARDSWISH, HARDSIGMOID, SILU, SIGMOID)

NAMES = {
    "none": NONE, "relu": RELU, "clip": CLIP, "hardswish": HARDSWISH, "hardsigmoid": HARDSIGMOID,
    "silu": SILU, "gelu": GELU, "gelu_tanh": GELU_TANH, "sigmoid": SIGMOID,
}


def activation_code(attrs: dict) -> tuple[int, float, float]:
    """``(code, p0, p1)`` for a fused-activation attribute set.

    ``act`` names the activation (a key of :data:`NAMES`); ``clip`` takes its bounds from
    ``act_min``/``act_max``, ``hardsigmoid`` its slope and offset from ``act_alpha``/``act_beta``
    (torch's 1/6 and 1/2 by default).
    """
    name = attrs.get("act", "none")
    if name not in NAMES:
        raise ValueError(f"unknown fused activation {name!r}; expected one of {sorted(NAMES)}")
    code = NAMES[name]
    if code == CLIP:
        return code, float(attrs.get("act_min", float("-inf"))), float(attrs.get("act_max", float("inf")))
    if code == HARDSIGMOID:
        return code, float(attrs.get("act_alpha", 1 / 6)), float(attrs.get("act_beta", 0.5))
    return code, 0.0, 0.0
