"""The two converter registries: ONNX op type -> importer, lowerkit op -> exporter.

Each conversion is one small function registered by decorator next to its siblings
(``_import_ops.py``, ``_export_ops.py``), so adding an op touches exactly one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# ONNX op type (default domain) -> function(ctx, node) -> list of outputs.
IMPORTERS: dict[str, Callable[..., Any]] = {}
# ONNX op type -> indices of the inputs it needs as compile-time constants.
CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {}
# lowerkit op name -> function(ctx, node) that appends ONNX nodes.
EXPORTERS: dict[str, Callable[..., Any]] = {}


def _register(table: dict[str, Callable[..., Any]], kind: str, names: tuple[str, ...]):
    def decorate(fn: F) -> F:
        for name in names:
            if name in table:
                raise ValueError(f"{kind} for {name!r} is registered twice")
            table[name] = fn
        return fn

    return decorate


def importer(*op_types: str, constant_inputs: tuple[int, ...] = ()) -> Callable[[F], F]:
    """Register the decorated function as the importer of the given ONNX op types.

    ``constant_inputs`` lists the inputs the importer reads as compile-time tensors
    (``Reshape``'s shape): the ONNX backend adapter specialises on graph inputs that feed them.
    """
    for op_type in op_types:
        CONSTANT_INPUTS[op_type] = tuple(constant_inputs)
    return _register(IMPORTERS, "ONNX importer", op_types)


def exporter(*ops: str) -> Callable[[F], F]:
    """Register the decorated function as the ONNX exporter of the given lowerkit ops."""
    return _register(EXPORTERS, "ONNX exporter", ops)
