"""matmul_into: MKL's sequential sgemm inside a one-thread BLAS limit where jit.cblas chose
MKL (rows of floats, big enough), numpy's matmul everywhere else; the same product either way."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pytest.importorskip("threadpoolctl")

from lowerkit.backend.cpu import blas_limit, gemm  # noqa: E402


def _matrix(address: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The float32 matrix at ``address``: ``rows`` rows of ``cols``, ``ld`` floats apart."""
    pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(pointer, shape=(rows, ld))[:, :cols] if rows else np.empty((0, cols), np.float32)


@pytest.fixture
def calls(monkeypatch):
    """Record the sgemm calls matmul_into makes (a stand-in computing the product with numpy)."""
    made = []

    def fake_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        made.append((m, n, k, lda, ldb, ldc))
        np.matmul(_matrix(a, m, k, lda), _matrix(b, k, n, ldb), out=_matrix(c, m, n, ldc))

    monkeypatch.setattr(gemm, "_mkl", [fake_sgemm])
    monkeypatch.setattr(gemm, "MIN_MACS", 1)
    return made


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_one_thread_limit_uses_sgemm_with_leading_dimensions(calls):
    big = _rand(9, 12)
    a, b = big[:5, :7], _rand(7, 6, seed=1)  # a: rows of 7 floats, 12 apart
    out = np.full((5, 6), np.nan, np.float32)
    with blas_limit(1):
        gemm.matmul_into(a, b, out)
    assert calls == [(5, 6, 7, 12, 6, 6)]
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_numpy_elsewhere(calls):
    a, b = _rand(5, 7), _rand(7, 6, seed=1)
    out = np.empty((5, 6), np.float32)
    gemm.matmul_into(a, b, out)  # no limit in force: BLAS runs its own threads
    with blas_limit(2):
        gemm.matmul_into(a, b, out)
    with blas_limit(1):
        gemm.matmul_into(np.asfortranarray(a), b, out)  # columns of floats
        gemm.matmul_into(a.astype(np.float64), b, out)
    assert calls == []
    with blas_limit(1):
        gemm.matmul_into(a, b, out)
    assert len(calls) == 1
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_small_products_stay_on_numpy(monkeypatch):
    monkeypatch.setattr(gemm, "_mkl", [lambda *args: pytest.fail("a small product went to sgemm")])
    a, b = _rand(4, 4), _rand(4, 4, seed=1)
    out = np.empty((4, 4), np.float32)
    with blas_limit(1):
        gemm.matmul_into(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-6)


def test_the_real_library_agrees_with_numpy():
    gemm._mkl.clear()  # find it for real (MKL where installed, else numpy everywhere)
    a, b = _rand(200, 150), _rand(150, 120, seed=1)
    out = np.empty((200, 120), np.float32)
    with blas_limit(1):
        gemm.matmul_into(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
