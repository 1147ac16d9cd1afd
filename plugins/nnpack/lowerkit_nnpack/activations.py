"""Activations nnpack fuses into its convolutions (an extension beyond NNPACK's ReLU).

NNPACK's layer set has ReLU only. Mobile networks put relu6 / hardswish / SiLU after
every convolution, and a backend that takes the convolution but not the activation splits
the graph at every layer (one region call and two copies per boundary). nnpack therefore
claims these activations on feature maps (rank-4 tensors) and runs them in the epilogue of
the convolution producing them — the compiled output transforms and depthwise kernels of
``lowerkit.backend.cpu.jit`` take the activation as a code — or, when nothing fuses,
as one compiled in-place pass. Codes come from ``lowerkit.backend.cpu.jit.activation``
(plain Python: nothing here imports numba).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from lowerkit.backend.cpu import jit
from lowerkit.backend.cpu.jit.activation import NAMES, activation_code
from lowerkit.ir.node import Node

from .support import attrs_of

# (code, p0, p1): which activation and its two parameters; (0, 0.0, 0.0) is none.
Activation = tuple[int, float, float]
NONE: Activation = (NAMES["none"], 0.0, 0.0)
RELU: Activation = (NAMES["relu"], 0.0, 0.0)


def activation_of(node: Node) -> Activation:
    """The fused-activation code of activation node ``node`` (an op of ``support.ACTIVATION_OPS``)."""
    attrs = attrs_of(node)
    op = node.op
    if op in ("relu", "hardswish", "silu", "sigmoid"):
        return activation_code({"act": op})
    if op == "gelu":
        return activation_code({"act": "gelu_tanh" if attrs.get("approximate", "none") == "tanh" else "gelu"})
    if op == "hardsigmoid":
        return activation_code({"act": "hardsigmoid", "act_alpha": attrs.get("alpha", 1 / 6),
                                "act_beta": attrs.get("beta", 0.5)})
    if op == "relu6":
        return activation_code({"act": "clip", "act_min": 0.0, "act_max": 6.0})
    if op == "clip":
        return activation_code({"act": "clip", "act_min": attrs.get("min", float("-inf")),
                                "act_max": attrs.get("max", float("inf"))})
    raise ValueError(f"{op!r} is not an activation nnpack fuses")


def activate_inplace(a: np.ndarray, act: Activation) -> None:
    """``a = act(a)`` in place; ``a`` is float32 and C-contiguous (the compiled pass of
    ``lowerkit.backend.cpu.jit.conv``; a small ReLU on numpy: ``jit.relu_inplace``)."""
    code, p0, p1 = act
    if code == NONE[0] or a.size == 0:
        return
    if code == RELU[0]:
        jit.relu_inplace(a)
        return

    if not a.flags.c_contiguous:  # pragma: no cover - the kernels pass contiguous blocks
        flat = np.ascontiguousarray(a)
        activate_inplace(flat, act)
        np.copyto(a, flat)
        return
    jit.load("conv").activate(a.reshape(-1), code, p0, p1)


def add_activate(out: np.ndarray, residual: np.ndarray, act: Activation) -> None:
    """``out = act(out + residual)`` in place (see :func:`add_activate_call`)."""
    add_activate_call(out, residual, act)()


def add_activate_call(out: np.ndarray, residual: np.ndarray, act: Activation) -> Callable[[], object]:
    """``out = act(out + residual)`` in place as a zero-argument call for these arrays: one
    compiled pass where both are C-contiguous float32 arrays of one shape
    (``jit.conv.add_activation``), else numpy's add, then :func:`activate_inplace`."""
    if out.size and jit.flat_float32(out, residual):
        flat = out.reshape(-1)
        return partial(jit.load("conv").add_activation, flat, residual.reshape(-1), flat, *act)
    return partial(_add_then_activate, out, residual, act)


def _add_then_activate(out: np.ndarray, residual: np.ndarray, act: Activation) -> None:
    np.add(out, residual, out=out)
    activate_inplace(out, act)


def apply(x: np.ndarray, act: Activation) -> np.ndarray:
    """``act(x)`` into a fresh float32 array (an activation no convolution fused)."""
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    activate_inplace(out, act)
    return out
