from __future__ import annotations

import numpy as np
import pytest

from lowerkit_nnpack.winograd_matrices import winograd_matrices


def test_f6x3_computes_a_1d_correlation_exactly(rng):
    at, g, bt = winograd_matrices(6, 3)
    assert at.shape == (6, 8) and g.shape == (8, 3) and bt.shape == (8, 8)
    d, k = rng.standard_normal(8), rng.standard_normal(3)
    want = np.array([d[i : i + 3] @ k for i in range(6)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, atol=1e-12)


def test_input_transform_has_lavin_gray_coefficients():
    _, _, bt = winograd_matrices(6, 3)
    assert set(np.round(np.abs(bt), 4).ravel()) <= {0.0, 0.25, 0.5, 1.0, 1.25, 2.0, 2.5, 4.0, 4.25, 5.0, 5.25}


def test_wrong_point_count_is_rejected():
    with pytest.raises(ValueError, match="needs 5 finite points"):
        winograd_matrices(4, 3, points=(0, 1, -1))
