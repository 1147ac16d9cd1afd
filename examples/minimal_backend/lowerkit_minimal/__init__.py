"""``minimal``: the smallest complete lowerkit backend (docs/writing-a-backend.md).

It runs element-wise ops with numpy. The payload is a one-line header naming the payload
version, followed by the module in lowerkit's own file format.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import lowerkit
from lowerkit.errors import FormatError, UnsupportedOperatorError
from lowerkit.backend.hookspecs import Unsupported, hookimpl
from lowerkit.ir import graph_of
from lowerkit.ir.interpreter import Interpreter

PAYLOAD_HEADER = b"lowerkit-minimal payload 1\n"

# One numpy function per op: (input arrays, attributes) -> output array.
KERNELS = {
    "add": lambda xs, attrs: xs[0] + xs[1],
    "sub": lambda xs, attrs: xs[0] - xs[1],
    "mul": lambda xs, attrs: xs[0] * xs[1],
    "neg": lambda xs, attrs: -xs[0],
    "relu": lambda xs, attrs: np.maximum(xs[0], 0).astype(xs[0].dtype),
}
# Resolved by lowerkit's interpreter itself; "call" only within the module.
STRUCTURAL = {"param", "constant"}


@hookimpl
def lowerkit_is_available() -> Any:
    if os.environ.get("LOWERKIT_MINIMAL_OFF"):
        return Unsupported("switched off by LOWERKIT_MINIMAL_OFF")
    return True


@hookimpl
def lowerkit_is_supported(node: Any) -> Any:
    if node.op in KERNELS or node.op in STRUCTURAL:
        return True
    if node.op == "call" and not node.attrs.get("module"):
        return True
    return Unsupported(f"minimal has no kernel for {node.op}")


@hookimpl
def lowerkit_preprocess(module: Any, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    for method in module.methods:
        for node in graph_of(module, method):
            if not lowerkit_is_supported(node):
                raise UnsupportedOperatorError(
                    f"backend minimal cannot run {node.where()} in method {method!r}"
                )
    return PAYLOAD_HEADER + lowerkit.dumps(module)


@hookimpl
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if not processed.startswith(PAYLOAD_HEADER):
        raise FormatError("not a lowerkit-minimal payload of version 1")
    module = lowerkit.loads(processed[len(PAYLOAD_HEADER):])
    interpreter = Interpreter(module, KERNELS)
    return {method: (interpreter, method) for method in module.methods}


@hookimpl
def lowerkit_execute(handle: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    interpreter, method = handle
    return interpreter.run(method, inputs)


@hookimpl
def lowerkit_options() -> list[dict[str, Any]]:
    return []  # minimal takes no compile_spec options


@hookimpl
def lowerkit_supported_ops() -> list[str]:
    return sorted(KERNELS)
