"""Smooth and piecewise-linear activations of mobile nets and transformers, and ``erf``.

All take one float tensor and keep its type. ``hardsigmoid`` carries ONNX's ``alpha``/``beta``
(torch's ``relu6(x + 3) / 6`` is ``alpha = 1/6, beta = 0.5``); ``gelu`` is exact (erf) or
the tanh approximation, as ``torch.nn.functional.gelu``'s ``approximate``.
"""

from __future__ import annotations

from ._checks import require_float
from .registry import AttrSpec, OpSchema, ShapeError, register

GELU_APPROXIMATIONS = ("none", "tanh")


def _float_unary(op: str):
    def infer(types, attrs):
        (x,) = types
        require_float(op, "x", x)
        if op == "gelu" and attrs["approximate"] not in GELU_APPROXIMATIONS:
            raise ShapeError(f"gelu: approximate must be 'none' or 'tanh', got {attrs['approximate']!r}")
        return [x]

    return infer


register(OpSchema(
    "hardsigmoid", ("x",), _float_unary("hardsigmoid"),
    attrs=(AttrSpec("alpha", "float", 1 / 6, doc="slope"), AttrSpec("beta", "float", 0.5, doc="offset")),
    doc="max(0, min(1, alpha * x + beta)); the defaults are torch's hardsigmoid (relu6(x + 3) / 6).",
))
register(OpSchema(
    "hardswish", ("x",), _float_unary("hardswish"),
    doc="x * relu6(x + 3) / 6, as torch.nn.functional.hardswish and ONNX HardSwish.",
))
register(OpSchema("silu", ("x",), _float_unary("silu"), doc="x * sigmoid(x) (swish)."))
register(OpSchema(
    "gelu", ("x",), _float_unary("gelu"),
    attrs=(AttrSpec("approximate", "str", "none", doc="'none' (exact, with erf) or 'tanh'"),),
    doc="x * Phi(x): exact 0.5 * x * (1 + erf(x / sqrt(2))), or with approximate='tanh' "
    "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).",
))
register(OpSchema("erf", ("x",), _float_unary("erf"), doc="the Gauss error function."))
