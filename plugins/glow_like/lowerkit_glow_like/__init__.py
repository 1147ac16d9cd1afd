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

from ._version import PAYLOAD_FORMAT, __version__

# The compiler, kernels, runtime and payload codec are imported by the hooks that use them,
# not here: loading the plugin (``lowerkit backends``, availability) stays cheap. So is
# ``dynamic`` (free-batch payloads, specialised per batch size).

__all__ = [
    "PAYLOAD_FORMAT", "__version__", "calibrate", "describe", "Profile", "lowerkit_compile",
    "lowerkit_destroy", "lowerkit_execute", "lowerkit_is_available", "lowerkit_is_supported",
    "lowerkit_options", "lowerkit_payload_versions", "lowerkit_preprocess", "lowerkit_supported_ops",
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

    from .kernels import KERNELS

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
    """Optimize, lower and memory-plan every method; return the protobuf payload. A module
    with a free batch dim is stored as is and specialised per batch size (``dynamic.py``)."""
    from ._compiler import compile_module
    from .dynamic import is_dynamic, preprocess_dynamic, split_options
    from .payload.codec import encode

    if is_dynamic(module):
        return preprocess_dynamic(module, compile_spec)
    spec = {m: split_options(m, o)[0] for m, o in (compile_spec or {}).items()}
    return encode(compile_module(module, spec))


@hookimpl
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Decode and validate the payload, bind each method for this thread (other threads get
    their own arena on their first call) and run it once on zeros: a payload whose
    instructions cannot be bound or run is a ``FormatError`` here, never later."""
    from .dynamic import MAGIC as DYNAMIC_MAGIC, compile_dynamic
    from .payload.codec import decode
    from .runtime import Executable

    if bytes(processed[: len(DYNAMIC_MAGIC)]) == DYNAMIC_MAGIC:
        return compile_dynamic(processed, compile_spec)
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
def lowerkit_payload_versions() -> list[str]:
    """The payload format this version reads and writes (one: see ``_version.py``)."""
    return [str(PAYLOAD_FORMAT)]


@hookimpl
def lowerkit_execute(handle: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run one method into its planned buffers; returns fresh output arrays."""
    return handle.run(inputs)


@hookimpl
def lowerkit_destroy(handles: dict[str, Any]) -> None:
    """Release the handles; arenas are numpy arrays freed with them, the worker pool is process-wide."""
    for handle in handles.values():
        handle.close()


def describe(processed: bytes) -> str:
    """The instruction listing and memory-plan numbers of every method in a payload."""
    from .dynamic import MAGIC as DYNAMIC_MAGIC, describe_dynamic
    from .lir import format_program
    from .payload.codec import decode

    if bytes(processed[: len(DYNAMIC_MAGIC)]) == DYNAMIC_MAGIC:
        return describe_dynamic(processed)
    return "\n\n".join(format_program(p) for p in decode(processed))


@hookimpl
def lowerkit_describe(processed: bytes) -> str:
    """For ``lowerkit inspect``: the instruction listing and memory plan of each method."""
    return describe(processed)


def __getattr__(name: str) -> Any:
    """``calibrate``, ``Profile`` (int8 quantization) and ``KERNELS``, imported on first use."""
    if name in ("calibrate", "Profile"):
        from . import quant

        return getattr(quant, name)
    if name == "KERNELS":
        from .kernels import KERNELS

        return KERNELS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def lowerkit_options() -> list[dict[str, Any]]:
    """compile_spec options per method (see docs/glow_like.md)."""
    return [
        {"name": "opt_level", "type": "int: 0|1|2", "default": 2,
         "doc": "0 straight translation, 1 cleanup, 2 every optimization"},
        {"name": "threads", "type": "int >= 1 | 'blas' | null", "default": None,
         "doc": "intra-op workers; null: one per CPU where it runs; 'blas': BLAS's own threads"},
        {"name": "precision", "type": "str: fp32|int8", "default": "fp32",
         "doc": "int8 quantizes with a calibration profile"},
        {"name": "profile", "type": "Profile or path", "default": None,
         "doc": "calibration profile from lowerkit_glow_like.calibrate (int8 only)"},
        {"name": "max_specializations", "type": "int >= 1", "default": 8,
         "doc": "free-batch modules: programs kept per method, one per batch size (LRU)"},
    ]


@hookimpl
def lowerkit_supported_ops() -> list[str]:
    """The core ops glow_like has a kernel for (float32 only)."""
    from lowerkit.opset import has_schema

    from .kernels import KERNELS

    return sorted(op for op in set(KERNELS) | set(_STRUCTURAL_OK) if has_schema(op))
