"""Modules with a free batch size: specialised per batch size on first use.

glow_like plans memory statically, so a program exists only for concrete shapes. For a
module whose inputs have symbolic dims, preprocess checks it (options, ops, and a trial
compile at batch 1) and stores the module itself (lowerkit's format) behind a magic of its
own; compile loads it, and each method builds, on the first call with a new batch size,
the program for that size: passes, lowering, memory plan and binding, exactly what
preprocess does for a static module. At most ``max_specializations`` programs per method
are kept (least recently used evicted; default 8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import lowerkit
from lowerkit.backend.specialize import Specializations, max_specializations_option
from lowerkit.errors import FormatError
from lowerkit.ir import GraphMethod, Module
from lowerkit.ir.specialize import bind_module, module_symbols

from ._compiler import compile_method
from ._options import parse_options
from .runtime import Executable

MAGIC = b"GLOWDYN1"  # a dynamic payload; static ones start with the protobuf codec's magic
OPTION = "max_specializations"


def is_dynamic(module: Module) -> bool:
    return bool(module_symbols(module))


def split_options(method: str, spec: dict[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The method's options without ``max_specializations``, and that limit."""
    spec = dict(spec or {})
    limit = max_specializations_option("glow_like", method, spec.pop(OPTION, None))
    return spec, limit


def preprocess_dynamic(module: Module, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    trial = bind_module(module, {s: 1 for s in module_symbols(module)})
    for name, method in module.methods.items():
        if isinstance(method, GraphMethod):
            options, _ = split_options(name, compile_spec.get(name))
            compile_method(trial, name, parse_options(name, options))  # errors now, on the host
    return MAGIC + lowerkit.dumps(module)


class DynamicExecutable:
    """A method of a free-batch module: one :class:`Executable` per batch size seen (LRU)."""

    def __init__(self, module: Module, method: str, options: dict[str, Any], limit: int) -> None:
        self.module = module
        self.method = method
        self.options = parse_options(method, options)
        self.table = Specializations(method, module.signature(method), self._build, limit, release=Executable.close)

    def _build(self, sizes: dict[str, int]) -> Executable:
        return Executable(compile_method(bind_module(self.module, sizes), self.method, self.options))

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.table.get(inputs).run(inputs)

    def close(self) -> None:
        self.table.close()


def compile_dynamic(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, DynamicExecutable]:
    try:
        module = lowerkit.loads(bytes(processed[len(MAGIC) :]))
    except lowerkit.LowerkitError as err:
        raise FormatError(f"glow_like dynamic payload: {err}") from None
    if not isinstance(module, Module):
        raise FormatError("glow_like dynamic payload does not hold an un-lowered module")
    handles = {}
    for name, method in module.methods.items():
        if isinstance(method, GraphMethod):
            options, limit = split_options(name, compile_spec.get(name))
            handles[name] = DynamicExecutable(module, name, options, limit)
    return handles


def describe_dynamic(processed: bytes) -> str:
    """For ``lowerkit inspect``: a free-batch payload holds no program until a batch size is seen."""
    module = lowerkit.loads(bytes(processed[len(MAGIC) :]))
    lines = ["free-batch module: one program per batch size, built on first use (max_specializations)"]
    lines += [f"  method {name}{module.signature(name)}" for name in module.methods]
    return "\n".join(lines)
