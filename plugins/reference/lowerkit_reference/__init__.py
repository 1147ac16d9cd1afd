"""lowerkit's reference backend: every op in plain numpy, run by the IR interpreter.

The entry point ``reference = "lowerkit_reference"`` names this module; its hook
implementations are the module-level functions below. The payload is the module itself in
lowerkit's file format, so a reference-lowered module is portable and always available.
Its kernels (:data:`KERNELS`) are the oracle other backends are tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import lowerkit
from lowerkit.errors import InputError
from lowerkit.backend.hookspecs import hookimpl
from lowerkit.ir.interpreter import Interpreter
from lowerkit.opset import has_schema

from .kernels import KERNELS

__all__ = [
    "KERNELS",
    "ReferenceHandle",
    "lowerkit_compile",
    "lowerkit_execute",
    "lowerkit_is_available",
    "lowerkit_is_supported",
    "lowerkit_payload_versions",
    "lowerkit_options",
    "lowerkit_preprocess",
    "lowerkit_supported_ops",
]


@dataclass(frozen=True, slots=True)
class ReferenceHandle:
    """One compiled method: an interpreter bound to the loaded module, and the method name."""

    interpreter: Interpreter
    method: str

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.interpreter.run(self.method, list(inputs))


@hookimpl
def lowerkit_preprocess(module: Any, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    """The payload is the module in lowerkit's own file format. The backend has no options."""
    for method, options in compile_spec.items():
        if options:
            raise InputError(
                f"backend 'reference' takes no options, but compile_spec[{method!r}] "
                f"gives {sorted(options)}"
            )
    return lowerkit.dumps(module)


@hookimpl
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, ReferenceHandle]:
    """Load the module back and bind one interpreter handle per method."""
    module = lowerkit.loads(processed)
    interpreter = Interpreter(module, KERNELS)
    return {method: ReferenceHandle(interpreter, method) for method in module.methods}


@hookimpl
def lowerkit_execute(handle: ReferenceHandle, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return handle(inputs)


@hookimpl
def lowerkit_payload_versions() -> list[str]:
    """The payload is a lowerkit file: this reads the file format majors lowerkit reads."""
    from lowerkit.serialization.container import FORMAT_VERSION

    return [str(FORMAT_VERSION[0])]


@hookimpl
def lowerkit_is_available() -> bool:
    return True  # plain numpy runs everywhere


@hookimpl
def lowerkit_is_supported(node: Any) -> bool:
    """Every op in the registry (structural ops are resolved by the interpreter)."""
    return has_schema(node.op)


@hookimpl
def lowerkit_options() -> list[dict[str, Any]]:
    """The reference backend takes no options."""
    return []


@hookimpl
def lowerkit_supported_ops() -> list[str]:
    """Every op of the core registry."""
    from lowerkit.opset import all_schemas

    return [schema.name for schema in all_schemas()]
