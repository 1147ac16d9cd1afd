"""The worker pool's placement: each worker pinned to a CPU of its own (worker j to the j-th
CPU of the mask at the pool's creation), the calling thread — on a call that comes after the
pool sat idle for IDLE_S — to the first CPU while it runs its share and back on its own mask
after; none of it with LOWERKIT_TEAM_PINNING=0, or where the mask has fewer CPUs than the
pool has threads.

Each test starts pools of its own (the module's pool table replaced) and shuts them down."""

from __future__ import annotations

import os
import threading
from importlib import import_module

import pytest

from lowerkit.backend.cpu import PINNING_ENV, run_parallel

pool_module = import_module("lowerkit.backend.cpu.pool")  # the package's ``pool`` is the function

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs and sched_setaffinity",
)


@pytest.fixture
def fresh_pools(monkeypatch):
    """Empty pool tables for the test; the pools it starts are shut down after it."""
    pools: dict = {}
    monkeypatch.setattr(pool_module, "_pools", pools)
    monkeypatch.setattr(pool_module, "_placements", {})
    monkeypatch.setattr(pool_module, "_ended", {})
    monkeypatch.setattr(pool_module, "_warm_left", {})
    monkeypatch.delenv(PINNING_ENV, raising=False)
    yield pools
    for executor in pools.values():
        executor.shutdown(wait=True)


def _masks_seen(threads: int) -> dict[int, set[int]]:
    """Each share's thread id -> its affinity while it ran."""
    seen: dict[int, set[int]] = {}
    lock = threading.Lock()

    def share(_):
        with lock:
            seen[threading.get_native_id()] = os.sched_getaffinity(0)

    run_parallel(threads, share, range(threads))
    return seen


def test_workers_and_the_caller_each_run_on_a_cpu_of_their_own(fresh_pools):
    cpus = sorted(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    seen = _masks_seen(2)
    me = threading.get_native_id()
    assert seen[me] == {cpus[0]}  # the caller while it ran its share
    (worker,) = set(seen) - {me}
    assert seen[worker] == {cpus[1]}
    assert os.sched_getaffinity(0) == before  # the caller's own mask is back
    assert os.sched_getaffinity(worker) == {cpus[1]}  # the worker stays pinned between calls


def test_a_caller_whose_mask_lacks_the_first_cpu_stays_as_it_is(fresh_pools):
    cpus = sorted(os.sched_getaffinity(0))
    _masks_seen(2)  # the pool, placed on the whole mask

    def elsewhere():
        os.sched_setaffinity(0, set(cpus[1:]))
        return _masks_seen(2)[threading.get_native_id()], os.sched_getaffinity(0)

    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("seen", elsewhere()))
    thread.start()
    thread.join()
    during, after = box["seen"]
    assert during == after == set(cpus[1:])


@pytest.mark.parametrize("setting", ["0", "off"])
def test_pinning_off_leaves_every_thread_where_the_scheduler_puts_it(fresh_pools, monkeypatch, setting):
    monkeypatch.setenv(PINNING_ENV, setting)
    everywhere = os.sched_getaffinity(0)
    seen = _masks_seen(2)
    assert len(seen) == 2 and all(mask == everywhere for mask in seen.values())


def test_a_pool_wider_than_the_mask_is_not_pinned(fresh_pools):
    threads = len(os.sched_getaffinity(0)) + 1
    everywhere = os.sched_getaffinity(0)
    seen = _masks_seen(threads)
    assert all(mask == everywhere for mask in seen.values())


def test_errors_still_come_back_and_the_mask_too(fresh_pools):
    before = os.sched_getaffinity(0)

    def share(i):
        if i == 1:
            raise ValueError("share 1")

    with pytest.raises(ValueError, match="share 1"):
        run_parallel(2, share, range(2))
    assert os.sched_getaffinity(0) == before


def test_calls_back_to_back_leave_the_caller_where_it_is_once_warm(fresh_pools, monkeypatch):
    """A call after the pool sat idle for IDLE_S pins the caller, and so do the WARM_CALLS - 1
    calls after it; then, back to back, the threads are still where the last calls put them."""
    cpus = sorted(os.sched_getaffinity(0))
    everywhere = os.sched_getaffinity(0)
    me = threading.get_native_id()
    monkeypatch.setattr(pool_module, "WARM_CALLS", 3)
    assert _masks_seen(2)[me] == {cpus[0]}  # a new pool: idle
    monkeypatch.setattr(pool_module, "IDLE_S", 60.0)
    assert [_masks_seen(2)[me] for _ in range(3)] == [{cpus[0]}, {cpus[0]}, everywhere]
    monkeypatch.setattr(pool_module, "IDLE_S", 0.0)
    assert _masks_seen(2)[me] == {cpus[0]}
    assert os.sched_getaffinity(0) == everywhere  # given back after each call
