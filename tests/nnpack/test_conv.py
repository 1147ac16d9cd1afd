"""How nnpack's kernels spread their work: pool workers with BLAS at cores // workers."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import cpu_count
from lowerkit_nnpack.conv import Conv2d, RunOptions
from lowerkit_nnpack.geometry import ConvGeometry


def _blas_threads():
    """Threads of numpy's BLAS (torch, when imported, may bring another one)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    infos = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]
    if not infos:
        pytest.skip("numpy's BLAS is not visible to threadpoolctl")
    return infos[0]["num_threads"]


@pytest.mark.parametrize("batch", [1, 4])
def test_implicit_gemm_pool_workers_run_single_threaded_blas(rng, batch):
    """Both paths carry the parallelism on the pool, with BLAS at cores // workers: a
    BLAS-threaded GEMM would leave OpenBLAS's threads spinning into the next kernel's pool
    work (docs/nnpack.md, "Options")."""
    # 16 input channels: 144 rows of columns, more than the panel GEMM (which runs no BLAS)
    # takes on one thread — at batch 4 on maps of more than 784 pixels, here 30x30, which is
    # still under the 1024 below which the batch is folded into one GEMM
    side = 9 if batch == 1 else 60
    geom = ConvGeometry(16, 8, (side, side), (3, 3), (2, 2), (1, 1, 1, 1))
    conv = Conv2d(geom, rng.standard_normal((8, 16, 3, 3)).astype(np.float32), algorithm="implicit_gemm",
                  options=RunOptions(2, min_parallel_flops=0))
    seen = []
    inner = conv.impl.compute_output

    def recording(*args):
        seen.append(_blas_threads())
        inner(*args)

    conv.impl.compute_output = recording
    conv(rng.standard_normal((batch, 16, side, side)).astype(np.float32))
    assert len(seen) == 2  # one call per worker: the work was split
    assert set(seen) == {max(1, cpu_count() // 2)}


def test_plan_without_dense_convolutions_keeps_blas_single_threaded(rng):
    """A lone linear layer gains nothing from BLAS's threads, which would spin after it."""
    import lowerkit
    from lowerkit import nn

    with nn.init_seed(0):
        net = nn.Linear(16, 8)
    lowered = lowerkit.to_backend(lowerkit.trace(net, rng.standard_normal((2, 16)).astype(np.float32)), "nnpack",
                                  {"forward": {"threads": 2}})
    plans = _plans(lowered)
    assert plans and not any(p.gemm_on_blas for p in plans)


def _plans(lowered):
    """The nnpack plans behind a lowered module (its compiled handles)."""
    from lowerkit_nnpack.plan import Plan

    return [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]


@pytest.mark.parametrize("groups, limits", [(8, False), (1, True)])
def test_a_plan_sets_blas_threads_only_where_a_kernel_calls_blas(rng, monkeypatch, groups, limits):
    """A depthwise layer (compiled, no BLAS) leaves BLAS's threads alone: setting and
    restoring them cost more than its kernel; a dense convolution holds the limit."""
    import lowerkit
    from lowerkit import nn
    from lowerkit_nnpack import plan as plan_module

    entered = []
    real = plan_module.blas_limit
    monkeypatch.setattr(plan_module, "blas_limit", lambda threads: entered.append(threads) or real(threads))
    with nn.init_seed(0):
        net = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=groups), nn.ReLU())
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    module = lowerkit.trace(net, x)
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    (plan,) = _plans(lowered)
    assert plan.uses_blas is limits
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)
    assert bool(entered) is limits


@pytest.mark.parametrize("stride, blas", [
    (2, "workers"),  # implicit GEMM only: one BLAS call on BLAS's threads
    (1, "beside"),  # Winograd: bands on the pool, cores // threads for BLAS
])
def test_plan_sets_blas_threads_by_its_algorithms(rng, monkeypatch, stride, blas):
    """A plan's GEMM layers run under one BLAS limit held over the call: ``threads`` BLAS
    threads and one worker when every dense convolution is a GEMM (implicit GEMM, direct),
    ``cores // threads`` when a Winograd or FFT layer splits over the pool; the process's
    setting is restored after. (Without team regions: tests/nnpack/test_team.py.)"""
    import lowerkit
    from lowerkit import nn
    from lowerkit_nnpack import algorithms as algos

    monkeypatch.setenv("LOWERKIT_NNPACK_TEAM", "0")
    with nn.init_seed(0):
        net = nn.Conv2d(32, 16, 3, stride=stride, padding=1)
    x = rng.standard_normal((1, 32, 40, 40)).astype(np.float32)
    lowered = lowerkit.to_backend(lowerkit.trace(net, x), "nnpack", {"forward": {"threads": 2}})
    seen = []

    def recording(inner):
        def record(self, *args):
            seen.append(_blas_threads())
            inner(self, *args)

        return record

    before = _blas_threads()
    for cls in algos.ALGORITHM_CLASSES.values():
        for name in ("compute_output", "run_chunk", "compute_rows"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, recording(vars(cls)[name]))
    lowered(x)
    expected = 2 if blas == "workers" else max(1, cpu_count() // 2)
    assert seen and set(seen) == {expected}
    assert _blas_threads() == before


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("batch, hw, stride, padding", [
    (1, 45, 2, (1, 1, 1, 1)),  # one image, bands of output rows (compiled columns per band)
    (1, 30, 1, (2, 1, 0, 2)),  # stride 1, 14+ output columns, uneven padding
    (3, 40, 2, (0, 1, 1, 0)),  # batched chunks: the image's columns in one compiled pass
    (1, 9, 1, (1, 1, 1, 1)),  # 9 output columns: short rows, compiled too
])
def test_implicit_gemm_columns_match_the_direct_convolution(rng, workers, batch, hw, stride, padding):
    c, oc = 5, 7
    t, l, b, r = padding
    geom = ConvGeometry(c, oc, (hw, hw), (3, 3), (stride, stride), padding)
    w = rng.standard_normal((oc, c, 3, 3)).astype(np.float32)
    conv = Conv2d(geom, w, algorithm="implicit_gemm", options=RunOptions(workers, min_parallel_flops=0))
    assert conv.impl._im2col is not None  # every float32 geometry's columns are compiled
    x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    oh, ow = geom.out_hw
    want = np.zeros((batch, oc, oh, ow), np.float64)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride]
            want += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    np.testing.assert_allclose(conv(x), want, rtol=1e-4, atol=1e-4)
