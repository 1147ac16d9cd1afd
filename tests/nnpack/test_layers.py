from __future__ import annotations

import numpy as np
import pytest

from lowerkit_nnpack.conv import RunOptions
from lowerkit_nnpack.geometry import GeometryError
from lowerkit_nnpack.layers import Linear, MaxPool2d, relu, softmax


def _naive_max_pool(x, k, s, p):
    t, l, b, r = p
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf)
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.empty(x.shape[:2] + (oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]].max(axis=(2, 3))
    return out


@pytest.mark.parametrize(
    "k,s,p", [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1)), ((3, 2), (1, 2), (0, 1, 2, 0))]
)
def test_max_pool_matches_windowed_max(rng, k, s, p):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    pool = MaxPool2d(k, s, p)
    np.testing.assert_array_equal(pool(x), _naive_max_pool(x, k, s, p))
    np.testing.assert_array_equal(pool(x), _naive_max_pool(x, k, s, p))  # reused padded workspace


def test_max_pool_rejects_padding_as_large_as_window():
    with pytest.raises(GeometryError, match=r"left padding must be in \[0, pooling size - 1\] = \[0, 1\], got 2"):
        MaxPool2d((2, 2), (2, 2), (0, 2, 0, 0))


@pytest.mark.parametrize("threads", [1, 2])
def test_linear(rng, threads):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((3, 7)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    layer = Linear(w, b, options=RunOptions(threads, min_parallel_flops=0))
    np.testing.assert_allclose(layer(x), x @ w.T + b, rtol=1e-5, atol=1e-5)
    with pytest.raises(GeometryError, match=r"input must have 7 features in its last axis, got shape \[5, 6\]"):
        layer(x[:, :6])


def test_relu_and_softmax(rng):
    x = rng.standard_normal((4, 10)).astype(np.float32) * 30
    np.testing.assert_array_equal(relu(x), np.maximum(x, 0))
    y = softmax(x)
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
