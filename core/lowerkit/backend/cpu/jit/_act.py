"""The activations as numba functions (codes from :mod:`.activation`); imports numba."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_SQRT_HALF = np.float32(1 / math.sqrt(2))
_TANH_K = np.float32(math.sqrt(2 / math.pi))
_ZERO, _ONE, _HALF, _THREE, _SIX = (np.float32(v) for v in (0, 1, 0.5, 3, 6))


@njit(inline="always", nogil=True, cache=True)
def act(v, code, p0, p1):
    """One value through activation ``code`` (branchy: for short loops and epilogues)."""
    if code == 0:
        return v
    if code == 1:
        return max(v, _ZERO)
    if code == 2:
        return min(max(v, np.float32(p0)), np.float32(p1))
    if code == 3:
        return v * min(max(v + _THREE, _ZERO), _SIX) / _SIX
    if code == 4:
        return min(max(np.float32(p0) * v + np.float32(p1), _ZERO), _ONE)
    if code == 5:
        return v / (_ONE + np.float32(math.exp(-v)))
    if code == 6:
        return _HALF * v * (_ONE + np.float32(math.erf(v * _SQRT_HALF)))
    if code == 7:
        return _HALF * v * (_ONE + np.float32(math.tanh(_TANH_K * (v + np.float32(0.044715) * v * v * v))))
    return _ONE / (_ONE + np.float32(math.exp(-v)))


@njit(inline="always", nogil=True, cache=True)
def act_span(a, lo, hi, code, p0, p1):
    """``a[lo:hi] = act(a[lo:hi])`` in place; the branch is outside the loops so they vectorise."""
    if code == 0:
        return
    if code == 1:
        for i in range(lo, hi):
            a[i] = max(a[i], _ZERO)
    elif code == 2:
        f0, f1 = np.float32(p0), np.float32(p1)
        for i in range(lo, hi):
            a[i] = min(max(a[i], f0), f1)
    elif code == 3:
        for i in range(lo, hi):
            v = a[i]
            a[i] = v * min(max(v + _THREE, _ZERO), _SIX) / _SIX
    else:
        for i in range(lo, hi):
            a[i] = act(a[i], code, p0, p1)
