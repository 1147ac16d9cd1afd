"""Element-wise kernels: numpy ufuncs writing into ``out``; ``add`` may carry a fused activation,
and in team mode a large float32 sum runs as one team region (``jit.team.add_activation``)."""

from __future__ import annotations

import numpy as np

from ._base import apply_activation, kernel

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_UNARY = {"neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh}


def _binary(ufunc):
    def prepare(inputs, outputs, attrs, scratch, team=None):
        a, b = inputs
        (out,) = outputs
        if attrs.get("act", "none") == "none":
            serial = lambda: ufunc(a, b, out=out)  # noqa: E731
        else:
            def serial():
                ufunc(a, b, out=out)
                apply_activation(out, attrs)
        if team is not None and ufunc is np.add and _team_sum_fits(a, b, out):
            return _team_sum(a, b, out, attrs, team, serial)
        return serial

    return prepare


# Residual sums of at least this many elements run as a team region (both cores, each on the
# band of the sum its GEMM band just wrote); ResNet-50's 16 sums took 2.6 ms of a 38 ms call
# on the calling thread.
TEAM_SUM_MIN_ELEMENTS = 16_384


def _team_sum_fits(a, b, out) -> bool:
    return (a.shape == b.shape == out.shape and out.size >= TEAM_SUM_MIN_ELEMENTS
            and all(v.dtype == np.float32 and v.flags.c_contiguous for v in (a, b, out)))


def _team_sum(a, b, out, attrs, team, serial):
    """``out = act(a + b)`` as one team region (``jit.team.add_activation``), the serial form
    while the team is off."""
    from lowerkit.backend.cpu import jit

    kernels = team.kernels()
    code, p0, p1 = jit.activation_code(attrs)
    fa, fb, fo = a.reshape(-1), b.reshape(-1), out.reshape(-1)

    def run():
        if team.usable():
            kernels.add_activation(fa, fb, fo, code, p0, p1, team.ways)
        else:
            serial()

    return run


def _unary(ufunc):
    def prepare(inputs, outputs, attrs, scratch):
        (x,), (out,) = inputs, outputs
        return lambda: ufunc(x, out=out)

    return prepare


for _op, _ufunc in _BINARY.items():
    kernel(_op, inplace=True, team=_op == "add")(_binary(_ufunc))
kernel("glow.add", inplace=True, team=True)(_binary(np.add))
for _op, _ufunc in _UNARY.items():
    kernel(_op, inplace=True)(_unary(_ufunc))


@kernel("relu", inplace=True)
def _relu(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
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
