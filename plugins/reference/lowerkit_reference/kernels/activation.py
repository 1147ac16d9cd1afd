"""Activations of mobile nets and transformers, ``erf``, ``pow`` and ``where``."""

from __future__ import annotations

import math

import numpy as np

_ERF = np.frompyfunc(math.erf, 1, 1)  # exact to double precision: the oracle's choice over speed


def erf_array(x: np.ndarray) -> np.ndarray:
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype).reshape(x.shape)


def hardsigmoid(args, attrs):
    x = args[0]
    y = x * x.dtype.type(attrs["alpha"]) + x.dtype.type(attrs["beta"])
    return np.clip(y, x.dtype.type(0), x.dtype.type(1))


def hardswish(args, attrs):
    x = args[0]
    return x * np.clip(x + x.dtype.type(3), x.dtype.type(0), x.dtype.type(6)) / x.dtype.type(6)


def silu(args, attrs):
    x = args[0]
    e = np.exp(-np.abs(x))  # the stable sigmoid, as the sigmoid kernel
    return x * np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def gelu(args, attrs):
    x = args[0]
    xd = x.astype(np.float64)
    if attrs["approximate"] == "tanh":
        inner = math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)
        return (0.5 * xd * (1 + np.tanh(inner))).astype(x.dtype)
    return (0.5 * xd * (1 + erf_array(xd / math.sqrt(2)))).astype(x.dtype)


def erf(args, attrs):
    return erf_array(args[0])


def pow_(args, attrs):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.power(args[0], args[1])


def where(args, attrs):
    return np.where(args[0], args[1], args[2])


def cast(args, attrs):
    from lowerkit.ir import DTYPES

    with np.errstate(invalid="ignore", over="ignore"):
        return args[0].astype(DTYPES[attrs["dtype"]])


KERNELS = {
    "cast": cast,
    "hardsigmoid": hardsigmoid, "hardswish": hardswish, "silu": silu, "gelu": gelu, "erf": erf,
    "pow": pow_, "where": where,
}
