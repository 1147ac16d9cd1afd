"""lowerkit: lower neural-network modules to pluggable execution backends.

The public names are re-exported here; implementation modules are private (``_name``)
or live in subpackages; docs/architecture.md draws the layers.
"""

from __future__ import annotations

import sys

from . import autograd
from .backend import hookspecs
from .backend.hookspecs import Unsupported, hookimpl
from .backend.profile import profile
from .backend.registry import backends, register_backend, unregister_backend
from .lowering.lowered import LoweredModule
from .lowering.partitioned import PartitionedModule
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
    "PartitionedModule",
    "PluginError",
    "UnsupportedOperatorError",
    "autograd",
    "Unsupported",
    "backends",
    "check",
    "bench",
    "dumps",
    "graph_of",
    "hookimpl",
    "load",
    "loads",
    "models",
    "nn",
    "ops",
    "profile",
    "register_backend",
    "save",
    "to_backend",
    "trace",
    "unregister_backend",
]


# ``lowerkit.autograd.Trainer`` lives a floor above autograd, in lowerkit.training, which
# installs it when imported; autograd imports that module on the name's first use.
autograd.install_from("lowerkit.training", "Trainer")

_LAZY = {
    "models": ("models", None), "bench": ("cli.bench", "bench"),
    "nn": ("nn", None), "training": ("training", None), "check": ("deploy", "check"),
}


def __getattr__(name: str) -> object:
    # Imported on first use, not by `import lowerkit`: the model zoo and the benchmark sit in
    # the top layers (packages below them import lowerkit); nn (numpy.random), training and
    # deploy (importlib.metadata) cost ~50 ms that listing backends or loading a file never needs.
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(f"{__name__}.{module_name}")
    return module if attr is None else getattr(module, attr)
