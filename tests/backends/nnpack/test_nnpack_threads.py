from __future__ import annotations

import threading

import pytest

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
