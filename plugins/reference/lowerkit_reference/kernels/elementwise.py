"""Element-wise kernels: numpy broadcasting binaries and unary activations."""

from __future__ import annotations

import numpy as np


def add(args, attrs):
    return np.add(args[0], args[1])


def sub(args, attrs):
    return np.subtract(args[0], args[1])


def mul(args, attrs):
    return np.multiply(args[0], args[1])


def div(args, attrs):
    return np.divide(args[0], args[1])


def neg(args, attrs):
    return np.negative(args[0])


def relu(args, attrs):
    x = args[0]
    return np.maximum(x, np.zeros((), x.dtype))


def relu6(args, attrs):
    x = args[0]
    return np.clip(x, np.zeros((), x.dtype), np.full((), 6, x.dtype))


def clip(args, attrs):
    x = args[0]
    return np.clip(x, x.dtype.type(attrs["min"]), x.dtype.type(attrs["max"]))


def leaky_relu(args, attrs):
    x = args[0]
    return np.where(x >= 0, x, x * x.dtype.type(attrs["negative_slope"]))


def sigmoid(args, attrs):
    x = args[0]
    # exp of -|x| never overflows; the two branches are the same function.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def tanh(args, attrs):
    return np.tanh(args[0])


def exp(args, attrs):
    return np.exp(args[0])


def log(args, attrs):
    with np.errstate(divide="ignore", invalid="ignore"):  # -inf / nan as torch gives
        return np.log(args[0])


def sqrt(args, attrs):
    with np.errstate(invalid="ignore"):
        return np.sqrt(args[0])


KERNELS = {
    "add": add, "sub": sub, "mul": mul, "div": div, "neg": neg, "relu": relu, "relu6": relu6,
    "clip": clip, "leaky_relu": leaky_relu, "sigmoid": sigmoid, "tanh": tanh, "exp": exp,
    "log": log, "sqrt": sqrt,
}
