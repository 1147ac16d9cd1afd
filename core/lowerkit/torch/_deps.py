"""The optional ``torch`` dependency: imported on first use, with a helpful error if missing."""

from __future__ import annotations

from types import ModuleType

from ..errors import LowerkitError

INSTALL_HINT = "pip install lowerkit[torch]"


class TorchNotInstalledError(LowerkitError, ImportError):
    """The ``torch`` package, which ``lowerkit.torch`` needs, is not installed."""


def require_torch() -> ModuleType:
    """Return the ``torch`` module, or raise :class:`TorchNotInstalledError` saying how to get it."""
    try:
        import torch
    except ImportError as err:
        raise TorchNotInstalledError(
            f"lowerkit.torch needs the 'torch' package (with torch.export), which is not installed: {INSTALL_HINT}"
        ) from err
    if not hasattr(torch, "export"):
        raise TorchNotInstalledError(
            f"lowerkit.torch needs torch.export (PyTorch 2.5 or newer); torch {torch.__version__} is installed"
        )
    return torch
