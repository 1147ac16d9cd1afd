"""Element-wise ops: binary with numpy broadcasting, and unary activations."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .registry import AttrSpec, OpSchema, ShapeError, register


def _broadcast(types, attrs):
    a, b = types
    if a.dtype != b.dtype:
        raise ShapeError(f"operands must share a dtype, got {a.dtype} and {b.dtype}")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ShapeError(f"shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
    return [TensorType(a.dtype, shape)]


def _same(types, attrs):
    return [types[0]]


for _name, _doc in [
    ("add", "a + b with numpy broadcasting"),
    ("sub", "a - b with numpy broadcasting"),
    ("mul", "a * b with numpy broadcasting"),
    ("div", "a / b with numpy broadcasting"),
]:
    register(OpSchema(_name, ("a", "b"), _broadcast, doc=_doc))

for _name, _doc in [
    ("neg", "-x"),
    ("relu", "max(x, 0)"),
    ("sigmoid", "1 / (1 + exp(-x))"),
    ("tanh", "tanh(x)"),
    ("exp", "exp(x)"),
    ("log", "natural logarithm"),
    ("sqrt", "square root"),
]:
    register(OpSchema(_name, ("x",), _same, doc=_doc))

register(OpSchema("relu6", ("x",), _same, doc="min(max(x, 0), 6)"))
register(
    OpSchema(
        "clip",
        ("x",),
        _same,
        attrs=(AttrSpec("min", "float", float("-inf")), AttrSpec("max", "float", float("inf"))),
        doc="min(max(x, min), max)",
    )
)
register(
    OpSchema(
        "leaky_relu",
        ("x",),
        _same,
        attrs=(AttrSpec("negative_slope", "float", 0.01),),
        doc="x if x >= 0 else negative_slope * x",
    )
)
