"""Element-wise kernels: numpy ufuncs writing into ``out``; ``add`` may carry a fused activation
(then one compiled pass, ``jit.conv.add_activation``, where the operands allow it), and ``mul``
of a map by a squeeze-excitation gate is one compiled pass too (``jit.conv.scale_rows``)."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import jit

from ._base import apply_activation, kernel

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_UNARY = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh}


def _binary(ufunc):
    def prepare(inputs, outputs, attrs, scratch):
        a, b = inputs
        (out,) = outputs
        if attrs.get("act", "none") == "none":
            gated = _planes_times_gate(a, b, out) if ufunc is np.multiply else None
            return gated if gated is not None else lambda: ufunc(a, b, out=out)
        if ufunc is np.add and jit.flat_float32(a, b, out):  # a residual sum and its activation: one pass
            add_activation, act = jit.load("conv").add_activation, jit.activation_code(attrs)
            fa, fb, fo = a.reshape(-1), b.reshape(-1), out.reshape(-1)
            return lambda: add_activation(fa, fb, fo, *act)

        def run():
            ufunc(a, b, out=out)
            apply_activation(out, attrs)

        return run

    return prepare


def _planes_times_gate(a: np.ndarray, b: np.ndarray, out: np.ndarray):
    """``out = a * b`` for a map [N, C, H, W] and a gate [N, C, 1, 1], in either order (a
    squeeze-excitation gate the convolution after it did not fold), as one compiled pass over
    the planes (``jit.gate_planes``: ~3x numpy's broadcast multiply on 7x7 maps); None for any
    other operands."""
    gate_first = a.ndim == 4 and a.shape[2:] == (1, 1) and b.shape != a.shape
    return jit.gate_planes(b, a, out) if gate_first else jit.gate_planes(a, b, out)


def _unary(ufunc):
    def prepare(inputs, outputs, attrs, scratch):
        (x,), (out,) = inputs, outputs
        return lambda: ufunc(x, out=out)

    return prepare


# ``glow.add``: a residual sum with its activation (also the pass after a convolution whose
# fused residual add its form cannot take, ``conv.prepare_conv``).
prepare_add = _binary(np.add)
for _op, _ufunc in _BINARY.items():
    kernel(_op, inplace=True)(_binary(_ufunc))
kernel("glow.add", inplace=True)(prepare_add)
for _op, _ufunc in _UNARY.items():
    kernel(_op, inplace=True)(_unary(_ufunc))


@kernel("relu", inplace=True)
def _relu(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    if x.dtype == out.dtype == np.float32 and x.size >= jit.COMPILED_RELU_MIN and out.flags.c_contiguous:
        if x.ctypes.data == out.ctypes.data and x.strides == out.strides:  # in place: no copy
            return lambda: jit.relu_inplace(out)

        def compiled():  # a copy and the compiled pass beat numpy's maximum (jit.relu_inplace)
            np.copyto(out, x)
            jit.relu_inplace(out)

        return compiled
    return lambda: np.maximum(x, 0, out=out)


@kernel("relu6", inplace=True)
def _relu6(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    return lambda: np.clip(x, 0.0, 6.0, out=out)


@kernel("clip", inplace=True)
def _clip(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    lo, hi = attrs.get("min", float("-inf")), attrs.get("max", float("inf"))
    return lambda: np.clip(x, lo, hi, out=out)


@kernel("sigmoid", inplace=True)
def _sigmoid(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs

    def run():
        # 1 / (1 + exp(-x)), computed in out so no temporary is needed.
        np.negative(x, out=out)
        np.exp(out, out=out)
        np.add(out, 1.0, out=out)
        np.reciprocal(out, out=out)

    return run


@kernel("leaky_relu")  # not in place: it reads x after writing out
def _leaky_relu(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    slope = attrs.get("negative_slope", 0.01)
    pick = np.maximum if slope <= 1.0 else np.minimum

    def run():
        np.multiply(x, slope, out=out)
        pick(x, out, out=out)

    return run
