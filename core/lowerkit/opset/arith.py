"""Element-wise ``pow``, ``where`` (numpy broadcasting) and ``cast``, for exported graphs and attention masks."""

from __future__ import annotations

import numpy as np

from ..ir.types import DTYPES, TensorType
from ._checks import require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register


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


def _cast(types, attrs):
    (x,) = types
    if attrs["dtype"] not in DTYPES:
        raise ShapeError(f"cast: dtype must be one of {sorted(DTYPES)}, got {attrs['dtype']!r}")
    return [TensorType(attrs["dtype"], x.shape)]


register(OpSchema("cast", ("x",), _cast,
                  attrs=(AttrSpec("dtype", "str", doc="the result's dtype (f32, f16, i64, bool, ...)"),),
                  doc="x converted to dtype as numpy's astype (floats to integers truncate toward zero), "
                  "as torch's Tensor.to(dtype) and ONNX Cast."))
register(OpSchema("pow", ("a", "b"), _pow,
                  doc="a ** b with numpy broadcasting; float operands of one dtype."))
register(OpSchema("where", ("condition", "a", "b"), _where,
                  doc="a where condition (bool) is true, else b; the three broadcast like numpy."))
