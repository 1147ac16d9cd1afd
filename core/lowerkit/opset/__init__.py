"""The op registry: one schema per op. Importing this package registers every op family."""

from __future__ import annotations

from . import elementwise, structural  # noqa: F401  (register ops)
from .registry import REQUIRED, AttrSpec, OpSchema, ShapeError, all_schemas, get_schema, has_schema, register

__all__ = ["REQUIRED", "AttrSpec", "OpSchema", "ShapeError", "all_schemas", "get_schema", "has_schema", "register"]
