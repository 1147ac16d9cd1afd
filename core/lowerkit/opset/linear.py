"""Linear algebra: ``matmul`` (numpy semantics) and ``linear`` (torch semantics)."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._checks import require_float, require_same_dtype
from .registry import OpSchema, ShapeError, register


def _matmul(types, attrs):
    a, b = types
    require_same_dtype("matmul", [("a", a), ("b", b)])
    require_float("matmul", "a", a)
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"matmul: operands must have rank >= 1, got a {a} and b {b}")
    # 1-D operands are promoted (a to a row, b to a column) and the extra dim dropped after.
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(
            f"matmul: a has {a_shape[-1]} columns (shape {list(a.shape)}) "
            f"but b has {b_shape[-2]} rows (shape {list(b.shape)})"
        )
    try:
        batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ShapeError(
            f"matmul: batch dims {list(a_shape[:-2])} and {list(b_shape[:-2])} do not broadcast"
        ) from None
    shape = batch + (a_shape[-2], b_shape[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return [TensorType(a.dtype, shape)]


def _linear(types, attrs):
    x, weight = types[0], types[1]
    named = [("x", x), ("weight", weight)] + ([("bias", types[2])] if len(types) > 2 else [])
    require_same_dtype("linear", named)
    require_float("linear", "x", x)
    if weight.rank != 2:
        raise ShapeError(f"linear: weight must be [out_features, in_features], got {weight}")
    if x.rank == 0:
        raise ShapeError(f"linear: x must have rank >= 1, got {x}")
    out_features, in_features = weight.shape
    if x.shape[-1] != in_features:
        raise ShapeError(
            f"linear: x has {x.shape[-1]} features in its last dim but weight expects {in_features}"
        )
    if len(types) > 2 and types[2].shape != (out_features,):
        raise ShapeError(f"linear: bias must have shape [{out_features}], got {list(types[2].shape)}")
    return [TensorType(x.dtype, x.shape[:-1] + (out_features,))]


register(
    OpSchema(
        "matmul",
        ("a", "b"),
        _matmul,
        doc="Matrix product with numpy.matmul semantics: 1-D operands are promoted, "
        "leading batch dims broadcast.",
    )
)
register(
    OpSchema(
        "linear",
        ("x", "weight", "bias"),
        _linear,
        num_optional=1,
        doc="x @ weight.T + bias, as torch.nn.functional.linear; weight is [out, in], "
        "bias (optional) is [out].",
    )
)
