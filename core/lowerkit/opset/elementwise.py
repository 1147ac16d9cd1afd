"""Element-wise ops: binary with numpy broadcasting, and unary activations.

Binary ops take two operands of one dtype and broadcast like numpy. Activations keep
their input's type; the transcendental ones (and ``div``, ``clip``, ``leaky_relu``) need
float inputs so that the result keeps the input's dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._checks import require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register


def _binary(op: str, *, float_only: bool = False):
    def infer(types, attrs):
        a, b = types
        require_same_dtype(op, [("a", a), ("b", b)])
        if float_only:
            require_float(op, "a", a)
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ShapeError(
                f"{op}: shapes {list(a.shape)} and {list(b.shape)} do not broadcast"
            ) from None
        return [TensorType(a.dtype, shape)]

    return infer


def _unary(op: str, *, float_only: bool):
    def infer(types, attrs):
        (x,) = types
        if float_only:
            require_float(op, "x", x)
        elif x.dtype in ("bool", "u8") and op == "neg":
            raise ShapeError(f"{op}: x must be a signed or float tensor, got {x}")
        return [x]

    return infer


for _name, _doc in [
    ("add", "a + b with numpy broadcasting; both operands share one dtype."),
    ("sub", "a - b with numpy broadcasting; both operands share one dtype."),
    ("mul", "a * b with numpy broadcasting; both operands share one dtype."),
]:
    register(OpSchema(_name, ("a", "b"), _binary(_name), doc=_doc))
register(
    OpSchema("div", ("a", "b"), _binary("div", float_only=True),
             doc="a / b (true division) with numpy broadcasting; float operands of one dtype.")
)

for _name, _float, _doc in [
    ("neg", False, "-x"),
    ("relu", False, "max(x, 0)"),
    ("relu6", False, "min(max(x, 0), 6)"),
    ("sigmoid", True, "1 / (1 + exp(-x))"),
    ("tanh", True, "hyperbolic tangent"),
    ("exp", True, "e ** x"),
    ("log", True, "natural logarithm (nan below 0, -inf at 0)"),
    ("sqrt", True, "square root (nan below 0)"),
]:
    register(OpSchema(_name, ("x",), _unary(_name, float_only=_float), doc=_doc))

register(
    OpSchema(
        "clip",
        ("x",),
        _unary("clip", float_only=True),
        attrs=(
            AttrSpec("min", "float", float("-inf"), doc="lower bound"),
            AttrSpec("max", "float", float("inf"), doc="upper bound"),
        ),
        doc="min(max(x, min), max), as torch.clamp; float x.",
    )
)
register(
    OpSchema(
        "leaky_relu",
        ("x",),
        _unary("leaky_relu", float_only=True),
        attrs=(AttrSpec("negative_slope", "float", 0.01, doc="slope for x < 0"),),
        doc="x if x >= 0 else negative_slope * x; float x.",
    )
)
