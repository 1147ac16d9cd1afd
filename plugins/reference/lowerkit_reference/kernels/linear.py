"""Linear algebra kernels."""

from __future__ import annotations

import numpy as np


def matmul(args, attrs):
    return np.asarray(np.matmul(args[0], args[1]))  # 1-D @ 1-D gives a numpy scalar


def linear(args, attrs):
    # x[..., in] @ weight[out, in].T -> [..., out]
    y = np.matmul(args[0], args[1].T)
    if len(args) > 2:
        y = y + args[2]
    return y


KERNELS = {"matmul": matmul, "linear": linear}
