"""lowerkit: lower neural-network modules to pluggable execution backends.

The public names are re-exported here; implementation modules are private (``_name``)
or live in subpackages (``ir``, ``opset``, ``nn``, ``serialization``).
"""

from __future__ import annotations

from . import nn, ops
from ._lowered import LoweredModule
from ._lowering import to_backend
from ._plugins import backends, register_backend, unregister_backend
from ._profile import profile
from ._trace import trace
from .errors import (
    BackendExecutionError,
    BackendNotAvailableError,
    BackendNotFoundError,
    BackendUnavailableWarning,
    FormatError,
    InputError,
    LowerkitError,
    PluginError,
    UnsupportedOperatorError,
)
from .hookspecs import Unsupported, hookimpl
from .ir import Module, graph_of
from .serialization import dumps, load, loads, save

__version__ = "0.1.0"

__all__ = [
    "BackendExecutionError",
    "BackendNotAvailableError",
    "BackendNotFoundError",
    "BackendUnavailableWarning",
    "FormatError",
    "InputError",
    "LoweredModule",
    "LowerkitError",
    "Module",
    "PluginError",
    "UnsupportedOperatorError",
    "Unsupported",
    "backends",
    "dumps",
    "graph_of",
    "hookimpl",
    "load",
    "loads",
    "nn",
    "ops",
    "profile",
    "register_backend",
    "save",
    "to_backend",
    "trace",
    "unregister_backend",
]
