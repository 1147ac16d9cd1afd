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


def importer(*op_types: str) -> Callable[[F], F]:
    """Register the decorated function as the importer of the given ONNX op types."""
    return _register(IMPORTERS, "ONNX importer", op_types)


def exporter(*ops: str) -> Callable[[F], F]:
    """Register the decorated function as the ONNX exporter of the given lowerkit ops."""
    return _register(EXPORTERS, "ONNX exporter", ops)
