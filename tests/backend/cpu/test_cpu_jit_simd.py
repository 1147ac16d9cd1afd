"""The vector helpers of the compiled kernels (``lowerkit.backend.cpu.jit._simd``):
``split_pairs`` deinterleaves every count of pairs — whole vectors of 8, a scalar remainder,
none — at any offsets, and writes nothing outside its ranges; ``take_evens`` likewise keeps the
even ones, also where the last of them ends the array."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")


def _split(xf: np.ndarray, start: int, even: np.ndarray, e0: int, odd: np.ndarray, o0: int, count: int) -> None:
    from numba import njit

    from lowerkit.backend.cpu.jit._simd import split_pairs

    @njit(cache=False)
    def run(xf, start, even, e0, odd, o0, count):
        u = np.uint64
        split_pairs(xf, u(xf.ctypes.data), u(start), even, u(even.ctypes.data), u(e0), odd, u(odd.ctypes.data),
                    u(o0), u(count))

    run(xf, start, even, e0, odd, o0, count)


@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 16, 19, 40])
def test_split_pairs_deinterleaves_and_stays_in_range(count):
    rng = np.random.default_rng(count)
    xf = rng.standard_normal(2 * count + 13).astype(np.float32)
    start, e0, o0 = 3, 5, 2
    even = np.full(count + 11, -7.0, np.float32)
    odd = np.full(count + 9, -9.0, np.float32)
    _split(xf, start, even, e0, odd, o0, count)
    pairs = xf[start:start + 2 * count].reshape(count, 2)
    np.testing.assert_array_equal(even[e0:e0 + count], pairs[:, 0])
    np.testing.assert_array_equal(odd[o0:o0 + count], pairs[:, 1])
    assert (even[:e0] == -7).all() and (even[e0 + count:] == -7).all()
    assert (odd[:o0] == -9).all() and (odd[o0 + count:] == -9).all()


def test_one_array_holds_both_halves():
    """As the stride-2 kernels call it: even and odd phases are two ranges of one scratch."""
    xf = np.arange(64, dtype=np.float32)
    scratch = np.zeros(40, np.float32)
    _split(xf, 10, scratch, 0, scratch, 20, 19)
    np.testing.assert_array_equal(scratch[:19], np.arange(10, 48, 2))
    np.testing.assert_array_equal(scratch[20:39], np.arange(11, 48, 2))
    assert scratch[19] == 0 and scratch[39] == 0


def _evens(xf: np.ndarray, start: int, dst: np.ndarray, d0: int, count: int) -> None:
    from numba import njit

    from lowerkit.backend.cpu.jit._simd import take_evens

    @njit(cache=False)
    def run(xf, start, dst, d0, count):
        u = np.uint64
        take_evens(xf, u(xf.ctypes.data), u(start), dst, u(dst.ctypes.data), u(d0), u(count))

    run(xf, start, dst, d0, count)


@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 16, 17, 28, 40])
def test_take_evens_keeps_the_even_elements_and_stays_in_range(count):
    start, d0 = 3, 5
    # The source ends at the last even element: the vectors must not read past it.
    xf = np.random.default_rng(count).standard_normal(start + max(0, 2 * count - 1)).astype(np.float32)
    dst = np.full(count + 11, -7.0, np.float32)
    _evens(xf, start, dst, d0, count)
    np.testing.assert_array_equal(dst[d0:d0 + count], xf[start:start + 2 * count:2])
    assert (dst[:d0] == -7).all() and (dst[d0 + count:] == -7).all()
