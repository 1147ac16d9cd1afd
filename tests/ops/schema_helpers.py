"""Helpers of the schema tests: build types, run an op's inference, expect its errors."""

from __future__ import annotations

import re

import pytest

from lowerkit.ir.types import TensorType
from lowerkit.opset import ShapeError, get_schema


def T(*shape: int, dtype: str = "f32") -> TensorType:
    return TensorType(dtype, shape)


def infer(op: str, *types: TensorType, **attrs) -> list[TensorType]:
    schema = get_schema(op)
    return schema.infer(list(types), schema.normalize_attrs(attrs))


def shape_of(op: str, *types: TensorType, **attrs) -> tuple[int, ...]:
    (out,) = infer(op, *types, **attrs)
    return out.shape


def fails(op: str, message: str, *types: TensorType, **attrs) -> None:
    with pytest.raises(ShapeError, match=re.escape(message)):
        infer(op, *types, **attrs)
