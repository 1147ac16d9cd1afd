"""ONNX import and export (optional extra: ``pip install lowerkit[onnx]``).

``lowerkit.onnx.load(path)`` imports an ONNX model as a :class:`lowerkit.Module`;
``lowerkit.onnx.export(module, path)`` writes an un-lowered module as ONNX;
``lowerkit.onnx.backend_test_adapter`` runs ONNX models through lowerkit backends with ONNX's
``onnx.backend.base.Backend`` interface. ``import lowerkit`` never imports this package,
and this package imports ``onnx`` only when one of its functions runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._deps import OnnxNotInstalledError

if TYPE_CHECKING:  # pragma: no cover
    from ..ir import Module
    from ._importer import OnnxImport

__all__ = ["OnnxImport", "OnnxNotInstalledError", "export", "import_model", "load"]


def load(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, Any] | None = None,
) -> Module:
    """Import an ONNX model (a path, bytes or ``onnx.ModelProto``) as a lowerkit Module.

    The module has one method, ``forward``, taking the ONNX graph inputs (those without an
    initializer) in order and returning the graph outputs in order; initializers become
    parameters. lowerkit graphs have static shapes, so a model with symbolic dims (a dynamic
    batch) needs ``input_shapes={"x": [1, 3, 224, 224]}`` for those inputs.

    Raises ``FormatError`` (unreadable, or ``onnx.checker`` rejects it),
    ``UnsupportedOperatorError`` (listing every node that cannot be imported) and
    ``InputError`` (missing or contradictory ``input_shapes``).

    ``constant_inputs={"shape": array}`` fixes the value of graph inputs, which then stop
    being inputs of ``forward``: needed when an input feeds something lowerkit must know at
    import time (``Reshape``'s shape, ``Clip``'s bounds, ``Dropout``'s training flag).
    """
    from ._importer import load as _load

    return _load(model, input_shapes=input_shapes, constant_inputs=constant_inputs)


def import_model(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constant_inputs: Mapping[str, Any] | None = None,
) -> OnnxImport:
    """Like :func:`load`, but returns an :class:`OnnxImport`: the module and its name maps."""
    from ._importer import import_model as _import_model

    return _import_model(model, input_shapes=input_shapes, constant_inputs=constant_inputs)


def export(module: Any, path: Any = None, opset: int = 17, *, method: str = "forward") -> Any:
    """Export one method of an un-lowered module as an ONNX ``ModelProto`` (saved if ``path``)."""
    from ._exporter import export as _export

    return _export(module, path, opset=opset, method=method)


def __getattr__(name: str) -> Any:
    # Lazy, so that importing lowerkit.onnx does not import onnx.
    if name == "OnnxImport":
        from ._importer import OnnxImport

        return OnnxImport
    if name == "backend":  # ONNX's convention names a backend-test adapter `<package>.backend`
        import importlib

        return importlib.import_module(f"{__name__}.backend_test_adapter")
    raise AttributeError(f"module 'lowerkit.onnx' has no attribute {name!r}")
