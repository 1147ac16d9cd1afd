"""Winograd/Toom-Cook F(m, r) matrices (lowerkit.backend.cpu.winograd)."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import interpolation_points, winograd_matrices


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def test_f6x3_computes_a_1d_correlation_exactly(rng):
    at, g, bt = winograd_matrices(6, 3)
    assert at.shape == (6, 8) and g.shape == (8, 3) and bt.shape == (8, 8)
    d, k = rng.standard_normal(8), rng.standard_normal(3)
    want = np.array([d[i : i + 3] @ k for i in range(6)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, atol=1e-12)


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (6, 3), (2, 2), (3, 5)])
def test_every_tile_size_computes_a_2d_correlation(rng, m, r):
    at, g, bt = winograd_matrices(m, r)
    n = m + r - 1
    d, k = rng.standard_normal((n, n)), rng.standard_normal((r, r))
    want = np.array([[np.sum(d[i : i + r, j : j + r] * k) for j in range(m)] for i in range(m)])
    got = at @ ((g @ k @ g.T) * (bt @ d @ bt.T)) @ at.T
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_input_transform_has_lavin_gray_coefficients():
    _, _, bt = winograd_matrices(6, 3)
    assert set(np.round(np.abs(bt), 4).ravel()) <= {0.0, 0.25, 0.5, 1.0, 1.25, 2.0, 2.5, 4.0, 4.25, 5.0, 5.25}


def test_f4x3_is_lavin_and_grays_matrices():
    """The F(4x4, 3x3) matrices glow_like hard-coded before it used the generator, to the bit."""
    at, g, bt = winograd_matrices(4, 3)
    np.testing.assert_array_equal(bt, [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                                       [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]])
    np.testing.assert_array_equal(g, [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                                      [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    np.testing.assert_array_equal(at, [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                                       [0, 1, -1, 8, -8, 1]])


def test_default_points_are_the_usual_ones():
    assert interpolation_points(2, 3) == (0, 1, -1)
    assert interpolation_points(4, 3) == (0, 1, -1, 2, -2)
    assert [float(p) for p in interpolation_points(6, 3)] == [0, 1, -1, 2, -2, 0.5, -0.5]
    explicit = winograd_matrices(4, 3, points=(0, 1, -1, 2, -2))
    for a, b in zip(explicit, winograd_matrices(4, 3)):
        np.testing.assert_array_equal(a, b)


def test_wrong_point_count_is_rejected():
    with pytest.raises(ValueError, match="needs 5 finite points"):
        winograd_matrices(4, 3, points=(0, 1, -1))


def test_repeated_points_are_rejected():
    with pytest.raises(ValueError, match="must be distinct"):
        winograd_matrices(2, 3, points=(0, 1, 1))


def test_too_large_a_tile_has_no_standard_points():
    with pytest.raises(ValueError, match=r"no standard points for F\(12, 3\)"):
        interpolation_points(12, 3)
