"""The one registry of op schemas.

A schema names an op's inputs (trailing ones may be optional), its attributes with types
and defaults, its documentation, and its type inference: a function from input types and
attributes to output types that raises :class:`ShapeError` with a precise message.
Op families register themselves in the modules of this package (``elementwise.py``,
``conv.py``, ...); :mod:`lowerkit.opset` imports them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.node import AttrValue
from ..ir.types import TensorType

# Attribute kinds and the Python types their values have once normalised.
ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "tensor")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


class ShapeError(Exception):
    """Raised by type inference; the verifier turns it into an error that names the node."""


@dataclass(frozen=True, slots=True)
class AttrSpec:
    name: str
    kind: str
    default: object = REQUIRED
    doc: str = ""

    def normalize(self, value: object) -> AttrValue:
        """Coerce ``value`` to this attribute's canonical Python form or raise ``TypeError``."""
        kind = self.kind
        if kind == "int" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
        if kind == "float" and isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            return float(value)
        if kind == "bool" and isinstance(value, (bool, np.bool_)):
            return bool(value)
        if kind == "str" and isinstance(value, str):
            return value
        if kind in ("ints", "floats") and isinstance(value, (list, tuple)):
            item = AttrSpec(self.name, kind[:-1])
            return tuple(item.normalize(v) for v in value)  # type: ignore[misc]
        if kind == "tensor" and isinstance(value, np.ndarray):
            return value
        raise TypeError(f"attribute {self.name!r} expects {kind}, got {value!r}")


TypeInference = Callable[[Sequence[TensorType], dict[str, AttrValue]], list[TensorType]]


@dataclass(frozen=True, slots=True)
class OpSchema:
    """What an op takes, returns and means."""

    name: str
    inputs: tuple[str, ...]
    infer: TypeInference
    attrs: tuple[AttrSpec, ...] = ()
    num_optional: int = 0  # how many trailing inputs may be omitted
    variadic: bool = False  # the last input repeats (concat)
    num_outputs: int | None = 1  # None: decided per node (call)
    doc: str = ""

    @property
    def min_inputs(self) -> int:
        return len(self.inputs) - self.num_optional - (1 if self.variadic else 0)

    @property
    def max_inputs(self) -> int | None:
        return None if self.variadic else len(self.inputs)

    def attr(self, name: str) -> AttrSpec:
        for spec in self.attrs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def normalize_attrs(self, attrs: dict[str, object]) -> dict[str, AttrValue]:
        """Fill defaults, coerce types; raise ``TypeError`` on unknown or missing attributes."""
        known = {a.name for a in self.attrs}
        unknown = sorted(set(attrs) - known)
        if unknown:
            raise TypeError(f"{self.name} has no attribute(s) {unknown}; it takes {sorted(known)}")
        result: dict[str, AttrValue] = {}
        for spec in self.attrs:
            if spec.name in attrs:
                result[spec.name] = spec.normalize(attrs[spec.name])
            elif spec.default is REQUIRED:
                raise TypeError(f"{self.name} needs attribute {spec.name!r} ({spec.kind})")
            else:
                result[spec.name] = spec.normalize(spec.default) if spec.default is not None else None  # type: ignore[assignment]
        return result


_SCHEMAS: dict[str, OpSchema] = {}


def register(schema: OpSchema) -> OpSchema:
    """Add ``schema``; its inference is wrapped to accept symbolic dims (see ``symbolic.py``)."""
    if schema.name in _SCHEMAS:
        raise ValueError(f"op {schema.name!r} is registered twice")
    from dataclasses import replace

    from .symbolic import symbolic_inference

    schema = replace(schema, infer=symbolic_inference(schema.name, schema.infer))
    _SCHEMAS[schema.name] = schema
    return schema


def get_schema(op: str) -> OpSchema:
    try:
        return _SCHEMAS[op]
    except KeyError:
        raise KeyError(f"unknown op {op!r}") from None


def has_schema(op: str) -> bool:
    return op in _SCHEMAS


def all_schemas() -> list[OpSchema]:
    return [ _SCHEMAS[k] for k in sorted(_SCHEMAS) ]
