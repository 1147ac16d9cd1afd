"""lowerkit: lower neural-network modules to pluggable execution backends.

The public names are re-exported here; implementation modules are private (``_name``)
or live in subpackages; docs/architecture.md draws the layers.
"""

from __future__ import annotations

import sys

from . import autograd, nn, training  # training installs lowerkit.autograd.Trainer
from .backend import hookspecs
from .backend.hookspecs import Unsupported, hookimpl
from .backend.profile import profile
from .backend.registry import backends, register_backend, unregister_backend
from .lowering.lowered import LoweredModule
from .lowering.to_backend import to_backend
from .tracing import ops
from .tracing.api import trace
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
from .ir import Module, graph_of
from .serialization import dumps, load, loads, save

# The functional API lives with the tracer and the hook specs with the backend layer; both
# keep their historical import paths (``import lowerkit.ops``, ``lowerkit.hookspecs``).
sys.modules[__name__ + ".ops"] = ops
sys.modules[__name__ + ".hookspecs"] = hookspecs

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
    "autograd",
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
