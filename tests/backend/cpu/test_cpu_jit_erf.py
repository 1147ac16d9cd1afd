"""The vectorisable float32 erf of the compiled activations (GELU, the erf chain op) against
math.erf: absolute error under 5e-7 everywhere, relative under 1e-6 near zero, and the
special values."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("numba")


def scalar_over(name: str, xs: np.ndarray) -> np.ndarray:
    """``jit._act.<name>`` (a scalar float32 function the kernels inline) on every value of ``xs``."""
    from numba import njit

    from lowerkit.backend.cpu.jit import _act

    function = getattr(_act, name)

    @njit
    def run(a, out):
        for i in range(a.shape[0]):
            out[i] = function(a[i])

    out = np.empty_like(xs)
    run(xs, out)
    return out


def _erf32_over(xs: np.ndarray) -> np.ndarray:
    return scalar_over("erf32", xs)


def test_erf32_matches_math_erf():
    xs = np.concatenate([np.linspace(-6, 6, 24_001), np.linspace(-0.6, 0.6, 6_001)]).astype(np.float32)
    got = _erf32_over(xs)
    want = np.array([math.erf(float(v)) for v in xs])
    assert np.abs(got - want).max() < 5e-7
    near_zero = (np.abs(xs) < 0.5) & (xs != 0)
    assert (np.abs(got - want)[near_zero] / np.abs(want)[near_zero]).max() < 1e-6


def test_erf32_special_values():
    got = _erf32_over(np.array([np.inf, -np.inf, 0.0, -0.0, 1e-30, 40.0, np.nan], np.float32))
    assert got[0] == 1.0 and got[1] == -1.0 and got[2] == 0.0 and got[3] == 0.0
    assert got[4] == pytest.approx(2 / math.sqrt(math.pi) * 1e-30, rel=1e-6)
    assert got[5] == 1.0 and np.isnan(got[6])
