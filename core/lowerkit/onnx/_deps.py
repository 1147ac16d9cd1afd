"""The optional ``onnx`` dependency: imported on first use, with a helpful error if missing."""

from __future__ import annotations

from types import ModuleType

from ..errors import LowerkitError

INSTALL_HINT = "pip install lowerkit[onnx]"


class OnnxNotInstalledError(LowerkitError, ImportError):
    """The ``onnx`` package, which ``lowerkit.onnx`` needs, is not installed."""


def require_onnx() -> ModuleType:
    """Return the ``onnx`` module, or raise :class:`OnnxNotInstalledError` saying how to get it."""
    try:
        import onnx
    except ImportError as err:
        raise OnnxNotInstalledError(
            f"lowerkit.onnx needs the 'onnx' package, which is not installed: {INSTALL_HINT}"
        ) from err
    return onnx
