from __future__ import annotations

import threading

import numpy as np
import pytest

from lowerkit_nnpack.conv import Conv2d, RunOptions
from lowerkit_nnpack.geometry import ConvGeometry
from lowerkit_nnpack.threads import blas_limit, cpu_count, run_parallel, split


def test_split_covers_everything_in_nearly_equal_blocks():
    blocks = split(10, 3)
    assert [(b.start, b.stop) for b in blocks] == [(0, 4), (4, 7), (7, 10)]
    assert split(2, 8) == [slice(0, 1), slice(1, 2)]
    assert split(5, 1) == [slice(0, 5)]


def test_run_parallel_runs_every_item_and_reraises():
    seen = []
    lock = threading.Lock()

    def work(i):
        with lock:
            seen.append(i)

    run_parallel(2, work, list(range(7)))
    assert sorted(seen) == list(range(7))

    def fail(i):
        raise RuntimeError(f"item {i}")

    with pytest.raises(RuntimeError, match="item"):
        run_parallel(2, fail, [0, 1])


def _blas_threads():
    """Threads of numpy's BLAS (torch, when imported, may bring another one)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    infos = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]
    if not infos:
        pytest.skip("numpy's BLAS is not visible to threadpoolctl")
    return infos[0]["num_threads"]


def test_blas_limit_is_reference_counted_across_threads():
    before = _blas_threads()
    expected = max(1, cpu_count() // 2)
    inside = []
    entered, release = threading.Barrier(3), threading.Event()

    def hold():
        with blas_limit(2):
            entered.wait()
            release.wait()
            inside.append(_blas_threads())

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        entered.wait(timeout=30)
        during = _blas_threads()
    finally:
        release.set()
        for t in threads:
            t.join(timeout=30)
    assert during == expected
    assert inside == [expected, expected]
    assert _blas_threads() == before


@pytest.mark.parametrize("batch", [1, 4])
def test_implicit_gemm_pool_workers_run_single_threaded_blas(rng, batch):
    """Both paths carry the parallelism on the pool, with BLAS at cores // workers: a
    BLAS-threaded GEMM would leave OpenBLAS's threads spinning into the next kernel's pool
    work (docs/nnpack.md, "Options")."""
    geom = ConvGeometry(4, 8, (9, 9), (3, 3), (2, 2), (1, 1, 1, 1))
    conv = Conv2d(geom, rng.standard_normal((8, 4, 3, 3)).astype(np.float32), algorithm="implicit_gemm",
                  options=RunOptions(2, min_parallel_flops=0))
    seen = []
    inner = conv.impl.compute_output

    def recording(*args):
        seen.append(_blas_threads())
        inner(*args)

    conv.impl.compute_output = recording
    conv(rng.standard_normal((batch, 4, 9, 9)).astype(np.float32))
    assert len(seen) == 2  # one call per worker: the work was split
    assert set(seen) == {max(1, cpu_count() // 2)}


def test_plan_lets_each_kernel_set_the_blas_limit(rng):
    """Each kernel of a lowered module sets the BLAS limit for its own workers (cores //
    threads), and the process's setting is restored after the call."""
    import lowerkit
    from lowerkit import nn

    with nn.init_seed(0):
        net = nn.Conv2d(4, 8, 3, stride=2, padding=1)
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    lowered = lowerkit.to_backend(lowerkit.trace(net, x), "nnpack", {"forward": {"threads": 2}})
    from lowerkit_nnpack import algorithms

    seen = []
    inner = algorithms.ImplicitGemm.compute_output

    def recording(self, *args):
        seen.append(_blas_threads())
        inner(self, *args)

    before = _blas_threads()
    algorithms.ImplicitGemm.compute_output = recording
    try:
        lowered(x)
    finally:
        algorithms.ImplicitGemm.compute_output = inner
    assert seen and set(seen) == {max(1, cpu_count() // 2)}
    assert _blas_threads() == before
