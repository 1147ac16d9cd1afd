"""How a glow_like program spreads over its threads: team kernels where they can run
(tests/glow_like/test_team.py) for programs with dense or depthwise convolutions and no
Winograd one, else GEMMs on BLAS's own threads (no pool) for those programs, GEMM bands on
the pool otherwise; results match the serial program either way. And the one-pass GEMM
epilogue kernel. (Batches that run as slices, one per worker: tests/glow_like/test_batch_slices.py.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lowerkit_glow_like")
pytest.importorskip("numba")

from .test_jit import assert_close, conv_module, mixed_module, run_glow  # noqa: E402


def _winograd_everywhere(monkeypatch):
    from lowerkit_glow_like.passes import algorithm

    monkeypatch.setattr(algorithm, "MIN_CHANNELS", 1)
    monkeypatch.setattr(algorithm, "MIN_FLOPS", 0)
    monkeypatch.setattr(algorithm, "MIN_TILES", 1)


def test_programs_choose_blas_threads_or_the_pool(monkeypatch):
    monkeypatch.setenv("LOWERKIT_GLOW_TEAM", "0")  # the forms without team kernels
    x = np.zeros((1, 8, 12, 12), np.float32)
    dense = conv_module((1, 8, 12, 12), (8, 8, 1, 1), {})
    handle, _ = run_glow(dense, x, threads=2)
    assert (handle.blas_threads, handle.parallel) == (2, None)  # one GEMM on BLAS's threads, no pool
    handle, _ = run_glow(dense, x, threads=1)
    assert (handle.blas_threads, handle.parallel) == (1, None)
    monkeypatch.setenv("LOWERKIT_GLOW_GEMM_ON_POOL", "1")
    handle, _ = run_glow(dense, x, threads=2)
    assert handle.blas_threads == 1 and handle.parallel is not None
    monkeypatch.delenv("LOWERKIT_GLOW_GEMM_ON_POOL")
    depthwise = conv_module((1, 8, 12, 12), (8, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 8})
    handle, _ = run_glow(depthwise, x, threads=2)
    assert handle.blas_threads == 1 and handle.parallel is not None  # no dense GEMM: the pool
    _winograd_everywhere(monkeypatch)
    wino = conv_module((1, 8, 12, 12), (8, 8, 3, 3), {"padding": (1, 1, 1, 1)})
    handle, _ = run_glow(wino, x, threads=2)
    assert any(ins.attrs.get("algo") == "winograd" for ins in handle.program.instructions)
    assert handle.blas_threads == 1 and handle.parallel is not None  # 36 small GEMMs: pool bands


@pytest.mark.parametrize("winograd", [False, True], ids=["blas-threads", "pool"])
def test_both_ways_match_the_serial_program(winograd, monkeypatch):
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")  # batch 2 would otherwise run as slices
    monkeypatch.setenv("LOWERKIT_GLOW_TEAM", "0")
    if winograd:
        _winograd_everywhere(monkeypatch)
    module = mixed_module(seed=3)
    x = np.random.default_rng(3).standard_normal((2, 8, 12, 12)).astype(np.float32)
    serial, (expected,) = run_glow(module, x, threads=1)
    threaded, (got,) = run_glow(module, x, threads=2)
    assert (threaded.parallel is None) is not winograd
    assert_close(got, expected, tol=1e-5)
    assert_close(got, module.run("forward", x), tol=1e-4)


def test_bias_activation_kernel_matches_numpy_on_strided_rows():
    from lowerkit.backend.cpu import jit

    kernel = jit.load("conv").bias_activation
    rng = np.random.default_rng(5)
    base = rng.standard_normal((6, 40)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    code, p0, p1 = jit.activation_code({"act": "clip", "act_min": 0.0, "act_max": 6.0})
    for view in (base.copy(), base.copy()[:, 5:30]):  # contiguous rows, then a column window
        expected = np.clip(view + np.tile(bias, 2)[:, None], 0.0, 6.0)
        kernel(view, bias, code, p0, p1)
        np.testing.assert_allclose(view, expected, rtol=1e-6)
