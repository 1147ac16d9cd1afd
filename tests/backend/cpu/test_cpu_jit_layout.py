"""The compiled transpose of a stack of matrices (lowerkit.backend.cpu.jit.layout): exact against
numpy, over matrices whose sides are below, at and past whole 8 x 8 blocks and 64 x 64 tiles;
only the matrices of the range are written."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import jit  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 8, 8), (2, 96, 200), (3, 200, 96), (1, 13, 21), (2, 5, 3), (1, 64, 128),
                                   (2, 49, 768), (1, 7, 100), (4, 70, 9)])
def test_transpose_last_matches_numpy(shape):
    n, a, b = shape
    x = np.random.default_rng(a * b).standard_normal(shape).astype(np.float32)
    out = np.full((n, b, a), np.nan, np.float32)
    jit.load("layout").transpose_last(x, out, 0, n)
    np.testing.assert_array_equal(out, x.transpose(0, 2, 1))


def test_transpose_last_writes_only_its_range():
    x = np.random.default_rng(1).standard_normal((4, 24, 40)).astype(np.float32)
    out = np.full((4, 40, 24), np.nan, np.float32)
    jit.load("layout").transpose_last(x, out, 1, 3)
    np.testing.assert_array_equal(out[1:3], x[1:3].transpose(0, 2, 1))
    assert np.isnan(out[0]).all() and np.isnan(out[3]).all()
