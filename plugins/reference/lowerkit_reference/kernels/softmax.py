"""Softmax kernels, stable: exp never sees a positive argument."""

from __future__ import annotations

import numpy as np


def softmax(args, attrs):
    x = args[0]
    e = np.exp(x - np.max(x, axis=attrs["dim"], keepdims=True))
    return e / np.sum(e, axis=attrs["dim"], keepdims=True)


def log_softmax(args, attrs):
    x = args[0]
    shifted = x - np.max(x, axis=attrs["dim"], keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=attrs["dim"], keepdims=True))


KERNELS = {"softmax": softmax, "log_softmax": log_softmax}
