"""Dense convolutions beside BLAS's own threads (``Parallel.blas_threads`` > 1): one GEMM from
the calling thread, im2col copies and the compiled epilogue split over the pool, Winograd's
output transform reading one GEMM of all channels — all against the serial kernels; and the
per-program choice between GEMMs on BLAS's threads and GEMM bands on the pool."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lowerkit_glow_like")
pytest.importorskip("numba")

from lowerkit.backend.cpu import Parallel  # noqa: E402
from lowerkit_glow_like.kernels import KERNELS, conv  # noqa: E402

from .test_jit import conv_module, run_glow  # noqa: E402

WORKERS = (None, Parallel(2), Parallel(2, blas_threads=2), Parallel(3, blas_threads=3))


def _conv(x, w, b, attrs, parallel):
    pad = attrs["padding"]
    out_hw = [(x.shape[2 + i] + pad[i] + pad[i + 2] - w.shape[2 + i]) // attrs["stride"][i] + 1 for i in range(2)]
    out = np.empty((x.shape[0], w.shape[0], *out_hw), np.float32)
    KERNELS["conv2d"].prepare([x, w, b], [out], attrs, None, parallel=parallel)()
    return out


@pytest.mark.parametrize("w_shape, stride, padding, act", [
    ((32, 3, 3, 3), (1, 1), (1, 1, 1, 1), "relu"),  # im2col and epilogue both split over the pool
    ((16, 3, 7, 7), (2, 2), (3, 3, 3, 3), "hardswish"),  # strided stem
    ((36, 8, 1, 1), (1, 1), (0, 0, 0, 0), "clip"),  # pointwise: the epilogue alone split
])
def test_dense_conv_beside_blas_threads_matches_serial(w_shape, stride, padding, act, monkeypatch):
    monkeypatch.setattr(conv, "POOL_MIN_ELEMENTS", 1000)  # small inputs still take the pooled paths
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, w_shape[1], 41, 37)).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    attrs = {"stride": stride, "padding": padding, "dilation": (1, 1), "groups": 1, "act": act,
             "act_min": 0.0, "act_max": 6.0}
    expected = _conv(x, w, b, attrs, None)
    for parallel in WORKERS[1:]:
        np.testing.assert_allclose(_conv(x, w, b, attrs, parallel), expected, rtol=1e-5, atol=1e-5)


def test_winograd_output_of_one_gemm_matches_bands():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 19, 21)).astype(np.float32)
    w = rng.standard_normal((7, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1, "act": "relu"}
    expected = _conv(x, w, b, attrs, None)
    for parallel in WORKERS:
        got = _conv(x, w, b, {**attrs, "algo": "winograd"}, parallel)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_bias_activation_kernel_matches_numpy_on_strided_rows():
    from lowerkit.backend.cpu import jit

    kernel = jit.load("conv").bias_activation
    rng = np.random.default_rng(5)
    base = rng.standard_normal((6, 40)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    for view in (base.copy(), base.copy()[:, 5:30]):  # contiguous rows, then a column window
        expected = np.clip(view + np.tile(bias, 2)[:, None], 0.0, 6.0)
        kernel(view, bias, jit.activation_code({"act": "clip", "act_min": 0.0, "act_max": 6.0})[0], 0.0, 6.0)
        np.testing.assert_allclose(view, expected, rtol=1e-6)


def test_programs_with_winograd_band_their_gemms_on_the_pool(monkeypatch):
    from lowerkit_glow_like.passes import algorithm

    dense = conv_module((1, 8, 12, 12), (8, 8, 1, 1), {})
    handle, _ = run_glow(dense, np.zeros((1, 8, 12, 12), np.float32), threads=2)
    assert handle.blas_threads == 2  # GEMMs on BLAS's threads
    handle, _ = run_glow(dense, np.zeros((1, 8, 12, 12), np.float32), threads=1)
    assert handle.blas_threads == 1
    depthwise = conv_module((1, 8, 12, 12), (8, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 8})
    handle, _ = run_glow(depthwise, np.zeros((1, 8, 12, 12), np.float32), threads=2)
    assert handle.blas_threads == 1  # no dense GEMM to gain from BLAS's threads
    monkeypatch.setattr(algorithm, "MIN_CHANNELS", 1)
    monkeypatch.setattr(algorithm, "MIN_FLOPS", 0)
    monkeypatch.setattr(algorithm, "MIN_TILES", 1)
    wino = conv_module((1, 8, 12, 12), (8, 8, 3, 3), {"padding": (1, 1, 1, 1)})
    handle, _ = run_glow(wino, np.zeros((1, 8, 12, 12), np.float32), threads=2)
    assert any(ins.attrs.get("algo") == "winograd" for ins in handle.program.instructions)
    assert handle.blas_threads == 1  # 36 small GEMMs: bands on the pool
