"""Element-wise ``pow`` and ``where`` (numpy broadcasting), for exported graphs and attention masks."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._checks import require_float, require_same_dtype
from .registry import OpSchema, ShapeError, register


def _broadcast(op: str, named) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(t.shape for _, t in named)))
    except ValueError:
        shown = ", ".join(f"{n} {list(t.shape)}" for n, t in named)
        raise ShapeError(f"{op}: shapes do not broadcast: {shown}") from None


def _pow(types, attrs):
    a, b = types
    require_same_dtype("pow", [("a", a), ("b", b)])
    require_float("pow", "a", a)
    return [TensorType(a.dtype, _broadcast("pow", [("a", a), ("b", b)]))]


def _where(types, attrs):
    cond, a, b = types
    if cond.dtype != "bool":
        raise ShapeError(f"where: condition must be a bool tensor, got {cond}")
    require_same_dtype("where", [("a", a), ("b", b)])
    return [TensorType(a.dtype, _broadcast("where", [("condition", cond), ("a", a), ("b", b)]))]


register(OpSchema("pow", ("a", "b"), _pow,
                  doc="a ** b with numpy broadcasting; float operands of one dtype."))
register(OpSchema("where", ("condition", "a", "b"), _where,
                  doc="a where condition (bool) is true, else b; the three broadcast like numpy."))
