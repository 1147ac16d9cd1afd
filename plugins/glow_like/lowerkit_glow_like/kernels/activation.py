"""Activations of mobile nets and transformers, ``erf``, ``pow`` and ``where`` (numpy into ``out``)."""

from __future__ import annotations

import math

import numpy as np

from ._base import kernel


_TAYLOR_TERMS = 60
_TAYLOR_LIMIT = 3.0


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """out = erf(x) in float64 then cast: the Maclaurin series below |x| = 3 (60 terms, exact to
    ~1e-13), the asymptotic series of erfc above (error < 1e-9). Plain numpy, no scipy: loading
    another BLAS would escape the handle's thread limit."""
    xd = np.asarray(x, dtype=np.float64)
    small = np.clip(xd, -_TAYLOR_LIMIT, _TAYLOR_LIMIT)
    z = small * small
    # erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), by Horner in x^2.
    acc = np.full_like(xd, 1.0 / (2 * _TAYLOR_TERMS + 1))
    for n in range(_TAYLOR_TERMS, 0, -1):
        acc *= -z / n
        acc += 1.0 / (2 * n - 1)
    series = acc * small * (2 / math.sqrt(math.pi))
    a = np.maximum(np.abs(xd), _TAYLOR_LIMIT)
    inv2 = 1 / (2 * a * a)
    tail = 1 - inv2 * (1 - 3 * inv2 * (1 - 5 * inv2 * (1 - 7 * inv2 * (1 - 9 * inv2))))
    erfc = np.exp(-a * a) / (a * math.sqrt(math.pi)) * tail
    np.copyto(out, np.where(np.abs(xd) < _TAYLOR_LIMIT, series, np.sign(xd) * (1 - erfc)), casting="unsafe")


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
