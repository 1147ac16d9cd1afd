"""glow_like's ``relu`` kernel: numpy's maximum for small arrays, ``jit.relu_inplace`` (after a
copy, or on the buffer itself when the planner made the ReLU in place) for large ones."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import jit

glow = pytest.importorskip("lowerkit_glow_like")


def _relu(x, out):
    from lowerkit_glow_like.kernels import KERNELS

    return KERNELS["relu"].prepare([x], [out], {}, np.empty(0, np.uint8))


@pytest.mark.parametrize("size", [100, jit.COMPILED_RELU_MIN + 3])
@pytest.mark.parametrize("in_place", [False, True])
def test_relu_kernel_matches_numpy(size, in_place):
    if size >= jit.COMPILED_RELU_MIN:
        pytest.importorskip("numba")
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    x[:3] = [np.nan, -0.0, -np.inf]
    want = np.maximum(x, np.float32(0))
    source = x.copy()
    out = x if in_place else np.full_like(x, 7.0)
    _relu(x, out)()
    np.testing.assert_array_equal(out, want)
    if not in_place:
        np.testing.assert_array_equal(x, source)  # the input is left alone
