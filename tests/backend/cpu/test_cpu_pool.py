"""The shared worker pool and work splitting (lowerkit.backend.cpu.pool, .split)."""

from __future__ import annotations

import threading

import pytest

from lowerkit.backend.cpu import Parallel, cpu_count, pool, run_parallel, split


def test_split_covers_everything_in_nearly_equal_blocks():
    blocks = split(10, 3)
    assert [(b.start, b.stop) for b in blocks] == [(0, 4), (4, 7), (7, 10)]
    assert split(2, 8) == [slice(0, 1), slice(1, 2)]
    assert split(5, 1) == [slice(0, 5)]
    assert split(0, 3) == [slice(0, 0)]


def test_split_keep_empty_gives_one_slice_per_part():
    assert split(2, 4, keep_empty=True) == [slice(0, 1), slice(1, 2), slice(2, 2), slice(2, 2)]
    assert split(10, 3, keep_empty=True) == split(10, 3)
    assert split(0, 2, keep_empty=True) == [slice(0, 0), slice(0, 0)]


@pytest.mark.parametrize("total", range(0, 12))
@pytest.mark.parametrize("parts", range(1, 6))
def test_split_is_contiguous_and_balanced(total, parts):
    for keep_empty in (False, True):
        blocks = split(total, parts, keep_empty=keep_empty)
        assert blocks[0].start == 0 and blocks[-1].stop == total
        assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
        sizes = [b.stop - b.start for b in blocks]
        assert max(sizes) - min(sizes) <= 1
        assert len(blocks) == (parts if keep_empty else max(1, min(parts, total)))


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


def test_the_caller_runs_one_share_and_the_pool_the_others():
    where: dict[int, threading.Thread] = {}

    def work(i):
        where[i] = threading.current_thread()

    run_parallel(3, work, range(3))
    assert where[2] is threading.current_thread()
    assert all(where[i] is not threading.current_thread() for i in (0, 1))
    assert pool(3)._max_workers == 2  # threads - 1 workers: the caller is the third


def test_one_pool_per_thread_count_shared_by_every_caller():
    assert pool(2) is pool(2)
    assert pool(2) is not pool(3)


def test_parallel_runs_each_task_index_once():
    seen = []
    lock = threading.Lock()

    def task(j):
        with lock:
            seen.append(j)

    Parallel(3)(task)
    assert sorted(seen) == [0, 1, 2]
    assert Parallel(3).ways == 3


def test_cpu_count_is_the_affinity_of_this_process():
    import os

    assert 1 <= cpu_count() <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert cpu_count() == len(os.sched_getaffinity(0))
