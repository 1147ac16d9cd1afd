"""Activations of mobile nets and transformers, ``erf``, ``pow`` and ``where`` (numpy into ``out``)."""

from __future__ import annotations

import math

import numpy as np

from ._base import kernel


_SERIES_LIMIT = 0.5
# erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)): ten terms are exact to ~1e-16 below 0.5.
_SERIES = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(10)]
# Abramowitz & Stegun 7.1.26 for |x| >= 0.5: absolute error below 1.5e-7, i.e. 3e-7 relative there.
_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = erf(x), float32-accurate, in plain numpy (no scipy: loading another BLAS would
    escape the handle's thread limit): the Maclaurin series near 0, A&S 7.1.26 elsewhere."""
    # float32 arithmetic for float32 data (the approximation's error dominates anyway).
    xd = np.asarray(x, dtype=np.float32 if x.dtype == np.float32 else np.float64)
    z = xd * xd
    series = np.full_like(xd, _SERIES[-1])
    for c in reversed(_SERIES[:-1]):
        series *= z
        series += c
    series *= xd
    a = np.abs(xd)
    t = 1.0 / (1.0 + _P * a)
    poly = np.full_like(xd, _A[-1])
    for c in reversed(_A[:-1]):
        poly *= t
        poly += c
    poly *= t
    tail = 1.0 - poly * np.exp(-z)
    np.copyto(out, np.where(a < _SERIES_LIMIT, series, np.copysign(tail, xd)), casting="unsafe")


@kernel("erf", inplace=True)
def _erf(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    return lambda: erf_into(x, out)


@kernel("hardsigmoid", inplace=True)
def _hardsigmoid(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    alpha, beta = attrs.get("alpha", 1 / 6), attrs.get("beta", 0.5)

    def run():  # element-wise and in order: safe when out is x
        np.multiply(x, alpha, out=out)
        np.add(out, beta, out=out)
        np.clip(out, 0.0, 1.0, out=out)

    return run


@kernel("hardswish")
def _hardswish(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs

    def run():
        np.add(x, 3.0, out=out)
        np.clip(out, 0.0, 6.0, out=out)
        np.multiply(out, x, out=out)
        np.multiply(out, 1 / 6, out=out)

    return run


@kernel("silu")
def _silu(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs

    def run():
        with np.errstate(over="ignore"):  # exp(-x) overflows to inf for x << 0: the result is -0
            np.negative(x, out=out)
            np.exp(out, out=out)
            np.add(out, 1.0, out=out)
            np.divide(x, out, out=out)

    return run


@kernel("gelu")
def _gelu(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs
    tanh = attrs.get("approximate", "none") == "tanh"

    def run():
        if tanh:
            np.multiply(x, x, out=out)
            np.multiply(out, 0.044715, out=out)
            np.add(out, 1.0, out=out)
            np.multiply(out, x, out=out)
            np.multiply(out, math.sqrt(2 / math.pi), out=out)
            np.tanh(out, out=out)
        else:
            np.multiply(x, 1 / math.sqrt(2), out=out)
            erf_into(out, out)
        np.add(out, 1.0, out=out)
        np.multiply(out, x, out=out)
        np.multiply(out, 0.5, out=out)

    return run


@kernel("pow")
def _pow(inputs, outputs, attrs, scratch):
    (a, b), (out,) = inputs, outputs

    def run():
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            np.power(a, b, out=out)

    return run


@kernel("where")
def _where(inputs, outputs, attrs, scratch):
    (cond, a, b), (out,) = inputs, outputs
    return lambda: np.copyto(out, np.where(cond, a, b))


@kernel("cast")
def _cast(inputs, outputs, attrs, scratch):
    (x,), (out,) = inputs, outputs

    def run():
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(out, x, casting="unsafe")

    return run
