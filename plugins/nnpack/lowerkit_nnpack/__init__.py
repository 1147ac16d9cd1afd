"""lowerkit's ``nnpack`` backend: NNPACK's fast convolution algorithms, in numpy.

The entry point ``nnpack = "lowerkit_nnpack"`` names this module; the hook implementations
are the module-level functions below. It claims NNPACK's layer set (convolution forward
and stride-1 gradients, fully connected, max pooling, ReLU, softmax) in f32, plus
extensions it fuses into its convolutions (depthwise convolution, relu6 / clip / hardswish /
hardsigmoid / SiLU / GELU, residual adds), and runs each convolution with Winograd
F(6x6, 3x3) (or F(4x4, 3x3)), 8x8/16x16 FFT, implicit GEMM or a direct 1x1 GEMM.
See ``docs/nnpack.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from lowerkit.errors import FormatError, InputError, LowerkitError, UnsupportedOperatorError
from lowerkit.backend.hookspecs import Unavailable, hookimpl
from lowerkit.ir.module import GraphMethod

from .algorithms import check_algorithm
from .conv import Conv2d, RunOptions, conv2d
from .geometry import ConvGeometry, GeometryError
from .algorithms import ALGORITHMS
from .options import DEFAULTS, TRANSFORM_STRATEGIES, validate_options
from .selftest import run_self_test
from .support import CLAIMED_OPS, conv_geometry, is_depthwise, is_supported, support_reason

__all__ = [
    "CLAIMED_OPS",
    "Conv2d",
    "Conv2dInputGrad",
    "Conv2dWeightGrad",
    "ConvGeometry",
    "DEFAULTS",
    "NnpackHandle",
    "RunOptions",
    "conv2d",
    "lowerkit_compile",
    "lowerkit_destroy",
    "lowerkit_execute",
    "lowerkit_is_available",
    "lowerkit_is_supported",
    "lowerkit_payload_versions",
    "lowerkit_options",
    "lowerkit_preprocess",
    "lowerkit_supported_ops",
]

DISABLE_ENV = "LOWERKIT_NNPACK_DISABLE"

# The gradients, the execution plan and the payload codec (which brings in protobuf) are
# imported where they are used: loading the plugin to ask its availability stays cheap.


def __getattr__(name: str) -> Any:
    """``Conv2dInputGrad`` and ``Conv2dWeightGrad``, imported on first use."""
    if name in ("Conv2dInputGrad", "Conv2dWeightGrad"):
        from . import grad

        return getattr(grad, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class NnpackHandle:
    """One compiled method: its execution plan (a :class:`lowerkit_nnpack.plan.Plan`)."""

    method: str
    plan: Any

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.plan.run(inputs)


def _check_method(module: Any, method: str, options: dict[str, Any]) -> None:
    """Every node supported, and the chosen algorithm able to serve every convolution."""
    m = module.methods[method]
    if not isinstance(m, GraphMethod):
        raise InputError(f"nnpack: method {method!r} of {module.name} is already lowered; nnpack takes graphs")
    problems = []
    for node in m.graph.nodes:
        reason = support_reason(node)
        if reason is not None:
            problems.append(f"{node.where()}: {reason}")
    if problems:
        raise UnsupportedOperatorError(
            f"nnpack cannot run method {method!r}:\n  " + "\n  ".join(problems)
        )
    algorithm = options["algorithm"]
    if algorithm == "auto":
        return
    for node in m.graph.nodes:
        if node.op not in ("conv2d", "conv2d_input_grad") or is_depthwise(node):
            continue  # depthwise has one algorithm of its own
        geom = conv_geometry(node)
        if node.op == "conv2d_input_grad":
            from .grad import Conv2dInputGrad

            geom = Conv2dInputGrad(geom, None, algorithm="implicit_gemm").backward
        try:
            check_algorithm(algorithm, geom)
        except GeometryError as err:
            raise InputError(
                f"nnpack: method {method!r}: algorithm {algorithm!r} cannot serve {node.where()}: {err}"
            ) from None


@hookimpl
def lowerkit_preprocess(module: Any, compile_spec: dict[str, dict[str, Any]]) -> bytes:
    """Validate options and ops; the payload is a JSON options header plus the module's bytes."""
    spec = dict(compile_spec or {})
    extra = sorted(set(spec) - set(module.methods))
    if extra:
        raise InputError(
            f"nnpack: compile_spec names method(s) {extra} that {module.name} does not have; "
            f"its methods are {sorted(module.methods)}"
        )
    from .payload import encode

    options = {m: validate_options(m, spec.get(m)) for m in module.methods}
    for method in module.methods:
        _check_method(module, method, options[method])
    return encode(module, options)


@hookimpl
def lowerkit_compile(processed: bytes, compile_spec: dict[str, dict[str, Any]]) -> dict[str, NnpackHandle]:
    """Build one execution plan per method (kernel transforms precomputed, workspaces per thread)."""
    from .payload import decode
    from .plan import Plan

    module, options = decode(processed)
    checked = _validate_payload(module, options)
    handles = {}
    for method, m in module.methods.items():
        handles[method] = NnpackHandle(method, Plan(m.graph, module.parameters, checked[method]))
    return handles


def _validate_payload(module: Any, options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Everything preprocess checked, checked again on what the payload says: each method
    a graph of supported nodes, options known and in range. ``FormatError`` otherwise."""
    extra = sorted(set(options) - set(module.methods))
    if extra:
        raise FormatError(f"nnpack payload: options name method(s) {extra} the module does not have")
    checked = {}
    for method in module.methods:
        try:
            if not isinstance(options.get(method, {}), dict):
                raise InputError(f"nnpack: method {method!r}: options must be an object")
            checked[method] = validate_options(method, options.get(method))
            _check_method(module, method, checked[method])
        except LowerkitError as err:  # InputError, UnsupportedOperatorError: the payload's fault
            raise FormatError(f"nnpack payload: {err}") from None
    return checked


@hookimpl
def lowerkit_payload_versions() -> list[str]:
    """The payload formats this version reads; the one it writes first."""
    from .payload import READS

    return [str(v) for v in READS]


@hookimpl
def lowerkit_execute(handle: NnpackHandle, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return handle(inputs)


@hookimpl
def lowerkit_is_available() -> Any:
    """True unless ``LOWERKIT_NNPACK_DISABLE=1`` is set or the once-per-process self-test failed."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return Unavailable(f"disabled by {DISABLE_ENV}={os.environ[DISABLE_ENV]}")
    ok, reason = run_self_test()
    return True if ok else Unavailable(reason)


@hookimpl
def lowerkit_is_supported(node: Any, graph: Any) -> Any:
    return is_supported(node, graph)


@hookimpl
def lowerkit_destroy(handles: dict[str, Any]) -> None:
    """Nothing to free beyond what garbage collection reclaims (workspaces die with their plans)."""


@hookimpl
def lowerkit_options() -> list[dict[str, Any]]:
    """compile_spec options per method (see docs/nnpack.md)."""
    return [
        {"name": "algorithm", "type": "str: " + "|".join(ALGORITHMS), "default": DEFAULTS["algorithm"],
         "doc": "convolution algorithm; auto picks per layer"},
        {"name": "transform_strategy", "type": "str: " + "|".join(TRANSFORM_STRATEGIES),
         "default": DEFAULTS["transform_strategy"], "doc": "when kernel transforms are computed"},
        {"name": "threads", "type": "int >= 0", "default": DEFAULTS["threads"],
         "doc": "worker threads; 0: one per core of the machine that runs it"},
        {"name": "batch_threshold", "type": "int >= 1", "default": DEFAULTS["batch_threshold"],
         "doc": "batch size from which work is split over the batch"},
    ]


@hookimpl
def lowerkit_supported_ops() -> list[str]:
    """The layers nnpack claims (float32; convolution geometry is checked per node)."""
    return list(CLAIMED_OPS)
