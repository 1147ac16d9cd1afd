"""The vectorisable float32 exp of the compiled activations (SiLU, sigmoid, the tanh GELU,
erf's tail) against float64's: relative error under 1e-7 over its whole finite range, and the
values at and past the ends of that range."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from tests.backend.cpu.test_cpu_jit_erf import scalar_over  # noqa: E402


def _exp32_over(xs: np.ndarray) -> np.ndarray:
    return scalar_over("exp32", xs)


def test_exp32_within_1e_7_of_exp_over_its_range():
    # Every rounding case of n = round(x / ln 2) from 2^-126 to 2^127, densely near zero.
    xs = np.concatenate([np.linspace(-87.3, 88.3, 2_000_001), np.linspace(-1, 1, 200_001)]).astype(np.float32)
    got = _exp32_over(xs).astype(np.float64)
    relative = np.abs(got / np.exp(xs.astype(np.float64)) - 1)
    assert relative.max() < 1e-7


def test_exp32_at_the_ends_and_on_special_values():
    got = _exp32_over(np.array([0.0, -0.0, 1.0, np.nan, np.inf, -np.inf, -1000.0, 1000.0], np.float32))
    assert got[0] == 1.0 and got[1] == 1.0
    assert got[2] == pytest.approx(np.e, rel=1e-7)
    assert np.isnan(got[3])
    assert got[4] == np.inf and got[7] == np.inf
    # Below -87.3 the argument is clamped: the smallest normal float's neighbourhood, never 0
    # or a denormal (the SiLU and sigmoid that use it only need it to be tiny).
    assert 0 < got[5] < 1.3e-38 and got[6] == got[5]
