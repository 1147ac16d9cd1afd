"""The one process-wide BLAS thread limit (lowerkit.backend.cpu.blas)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from lowerkit.backend.cpu import blas_limit, blas_threads_beside, cpu_count

TIMEOUT = 30


def _blas_threads():
    """Threads of numpy's BLAS (torch, when imported, may bring another one)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    infos = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]
    if not infos:
        pytest.skip("numpy's BLAS is not visible to threadpoolctl")
    return infos[0]["num_threads"]


def test_blas_threads_beside_a_pool_share_the_cores():
    assert blas_threads_beside(1) == cpu_count()
    assert blas_threads_beside(cpu_count()) == 1
    assert blas_threads_beside(10 * cpu_count()) == 1
    assert blas_threads_beside(0) == cpu_count()


def test_blas_limit_is_reference_counted_across_threads():
    before = _blas_threads()
    expected = max(1, cpu_count() // 2)
    inside = []
    entered, release = threading.Barrier(3), threading.Event()

    def hold():
        with blas_limit(blas_threads_beside(2)):
            entered.wait()
            release.wait()
            inside.append(_blas_threads())

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        entered.wait(timeout=TIMEOUT)
        during = _blas_threads()
    finally:
        release.set()
        for t in threads:
            t.join(timeout=TIMEOUT)
    assert during == expected
    assert inside == [expected, expected]
    assert _blas_threads() == before


def test_regions_left_in_another_order_than_entered_restore_blas():
    """A enters, B enters, A leaves, B leaves, from two threads and with different limits:
    the setting found before A is back after B (and the first limit holds until then)."""
    before = _blas_threads()
    steps = [threading.Event() for _ in range(3)]
    seen = []

    def a():
        with blas_limit(1):
            steps[0].set()
            assert steps[1].wait(TIMEOUT)
        steps[2].set()

    def b():
        assert steps[0].wait(TIMEOUT)
        with blas_limit(cpu_count()):
            steps[1].set()
            assert steps[2].wait(TIMEOUT)
            seen.append(_blas_threads())

    threads = [threading.Thread(target=f, daemon=True) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert seen == [1]  # B joined the limit in force
    assert _blas_threads() == before


def test_an_error_inside_the_region_still_restores_blas():
    before = _blas_threads()
    with pytest.raises(RuntimeError, match="boom"):
        with blas_limit(1):
            assert _blas_threads() == 1
            raise RuntimeError("boom")
    assert _blas_threads() == before


def test_importing_the_cpu_support_does_not_import_threadpoolctl():
    code = "import sys, lowerkit.backend.cpu; print('threadpoolctl' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


def test_rescan_between_regions_finds_libraries_loaded_since():
    """A library loaded after the first region (numba loads SciPy's OpenBLAS) is held to the
    limit once ``rescan`` was called, also when no region was active at the rescan."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from lowerkit.backend.cpu import BlasLimiter

    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    if not before or max(before) < 2:
        pytest.skip("needs a BLAS running on more than one thread")
    limiter = BlasLimiter()
    with limiter.limit(1):
        pass
    limiter._libs = []  # as if every library in use now had been loaded after the first region
    limiter.rescan()
    with limiter.limit(1):
        inside = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert inside and all(n == 1 for n in inside)
