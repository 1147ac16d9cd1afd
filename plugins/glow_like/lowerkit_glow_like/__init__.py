"""glow_like: a lowerkit backend that compiles ahead of time, after Glow's design.

Preprocess (host) optimizes each method's graph, lowers it to a flat list of instructions
over explicit buffers, plans their memory statically and stores all of it with the
constants in a protobuf payload. Compile (target) only binds memory; execute runs the
instruction list into the planned, preallocated buffers. ``precision: "int8"`` with a
profile from :func:`calibrate` quantizes the program.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lowerkit import hookspecs
from lowerkit.errors import FormatError
from lowerkit.backend.hookspecs import hookimpl
from lowerkit.ir import Module, Node

from ._compiler import compile_module
from ._version import PAYLOAD_FORMAT, __version__
from .kernels import KERNELS
from .lir import format_program
from .payload.codec import decode, encode
from .runtime import Executable

__all__ = [
    "PAYLOAD_FORMAT", "__version__", "calibrate", "describe", "Profile", "lowerkit_compile",
    "lowerkit_destroy", "lowerkit_execute", "lowerkit_is_available", "lowerkit_is_supported",
    "lowerkit_preprocess",
]

_STRUCTURAL_OK = ("param", "constant")
# Operands that are masks: bool where every other value is float32.
_BOOL_OPERANDS = frozenset({("where", 0), ("scaled_dot_product_attention", 3)})


def _unsupported(reason: str):
    cls = getattr(hookspecs, "Unsupported", None)
    return cls(reason) if cls is not None else False


@hookimpl
def lowerkit_is_supported(node: Node) -> Any:
    """True for every float32 node of an op in the core registry that glow_like has a kernel for."""
    from lowerkit.opset import has_schema

    if node.op == "call":
        return _unsupported("glow_like inlines calls only inside a whole lowered module")
    if not has_schema(node.op) or (node.op not in KERNELS and node.op not in _STRUCTURAL_OK):
        return _unsupported(f"glow_like has no kernel for op {node.op!r}")
    for i, v in enumerate(list(node.inputs) + list(node.outputs)):
        if v.type.dtype == "bool" and (node.op, i) in _BOOL_OPERANDS:
            continue
        if v.type.dtype != "f32":
            return _unsupported(f"glow_like runs float32 only; {node.op} has {v.type.dtype} value %{v.name}")
    return True


@hookimpl
def lowerkit_is_available() -> bool:
    """glow_like needs only numpy: available wherever it is installed."""
    return True


@hookimpl
def lowerkit_preprocess(module: Module, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    """Optimize, lower and memory-plan every method; return the protobuf payload."""
    return encode(compile_module(module, compile_spec))


@hookimpl
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, Executable]:
    """Decode and validate the payload, bind each method for this thread (other threads get
    their own arena on their first call) and run it once on zeros: a payload whose
    instructions cannot be bound or run is a ``FormatError`` here, never later."""
    handles = {}
    for program in decode(processed):
        try:
            handle = Executable(program)
            with np.errstate(all="ignore"):
                handle.dry_run()
        except Exception as err:  # any failure of a validated payload means it is inconsistent
            raise FormatError(
                f"glow_like payload: method {program.method!r} cannot be bound and run: {err!r}"
            ) from None
        handles[program.method] = handle
    return handles


@hookimpl
def lowerkit_execute(handle: Executable, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run one method into its planned buffers; returns fresh output arrays."""
    return handle.run(inputs)


@hookimpl
def lowerkit_destroy(handles: dict[str, Executable]) -> None:
    """Release the handles; arenas are numpy arrays freed with them, the worker pool is process-wide."""
    for handle in handles.values():
        handle.close()


def describe(processed: bytes) -> str:
    """The instruction listing and memory-plan numbers of every method in a payload."""
    return "\n\n".join(format_program(p) for p in decode(processed))


@hookimpl
def lowerkit_describe(processed: bytes) -> str:
    """For ``lowerkit inspect``: the instruction listing and memory plan of each method."""
    return describe(processed)


from .quant import Profile, calibrate  # noqa: E402  (quantization builds on the above)
