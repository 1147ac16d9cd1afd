"""The op registry: one schema per op. Importing this package registers every op family."""

from __future__ import annotations

from . import conv, elementwise, linear, norm, pool, shape, softmax, structural  # noqa: F401  (register ops)
from . import activation, arith, attention, conv_transpose, indexing, normalization, reduce, resize  # noqa: F401
from . import grad, training  # noqa: F401  (backward and training ops, for lowerkit.autograd)
from ._checks import FLOAT_DTYPES, MAX_WINDOW, conv_output_size, pool_output_size
from .check import check_op_types
from .registry import REQUIRED, AttrSpec, OpSchema, ShapeError, all_schemas, get_schema, has_schema, register
from .structural import STRUCTURAL_OPS

__all__ = [
    "FLOAT_DTYPES", "MAX_WINDOW", "REQUIRED", "STRUCTURAL_OPS", "AttrSpec", "OpSchema", "ShapeError", "all_schemas", "check_op_types",
    "conv_output_size", "get_schema", "has_schema", "pool_output_size", "register",
]
