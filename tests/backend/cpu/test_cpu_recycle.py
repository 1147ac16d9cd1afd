"""recycled_empty / recycled_copy: large call outputs on buffers that earlier arrays gave back."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import ALIGNMENT, recycle, recycled_copy, recycled_empty

SMALL = 4096  # MIN_BYTES for these tests: no 32 MiB arrays needed


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(recycle, "MIN_BYTES", SMALL)
    monkeypatch.delenv("LOWERKIT_RECYCLE_BYTES", raising=False)
    with recycle._lock:
        recycle._buffers.clear()
    yield
    with recycle._lock:
        recycle._buffers.clear()


def test_a_large_array_is_aligned_and_its_buffer_comes_back_when_it_dies():
    first = recycled_empty((4, 1000), np.float32)
    assert first.shape == (4, 1000) and first.dtype == np.float32 and first.flags.c_contiguous
    assert first.ctypes.data % ALIGNMENT == 0
    address = first.ctypes.data
    assert recycle.recycled_bytes() == (16_000 + ALIGNMENT, 0)
    del first
    assert recycle.recycled_bytes() == (0, 16_000 + ALIGNMENT)
    again = recycled_empty((4000,), np.float32)  # the same bytes, another shape
    assert again.ctypes.data == address


def test_a_view_or_an_exported_buffer_keeps_the_memory_from_reuse():
    first = recycled_empty((4000,), np.float32)
    first[:] = 7.0
    view = first[10:20]
    del first
    other = recycled_empty((4000,), np.float32)
    other[:] = -1.0
    assert np.all(view == 7.0)  # not handed out again while the view lives
    exported = memoryview(other)
    del other, view
    third = recycled_empty((4000,), np.float32)
    third[:] = 3.0
    assert np.all(np.frombuffer(exported, np.float32) == -1.0)
    assert len(recycle._buffers) == 2  # the first buffer came back once the view died


def test_small_arrays_are_plain_aligned_arrays_and_never_kept():
    small = recycled_empty((10,), np.float32)
    assert small.ctypes.data % ALIGNMENT == 0 and not recycle._buffers
    copy = recycled_copy(np.arange(10, dtype=np.float32))
    assert np.array_equal(copy, np.arange(10)) and not recycle._buffers


def test_recycled_copy_copies_large_arrays_into_a_kept_buffer():
    source = np.arange(5000, dtype=np.float32).reshape(50, 100)[:, ::2]  # not contiguous
    copy = recycled_copy(source)
    assert copy.flags.c_contiguous and np.array_equal(copy, source)
    assert recycle.recycled_bytes()[0] == copy.nbytes + ALIGNMENT


def test_zero_bytes_turns_recycling_off(monkeypatch):
    monkeypatch.setenv("LOWERKIT_RECYCLE_BYTES", "0")
    array = recycled_empty((4000,), np.float32)
    assert array.ctypes.data % ALIGNMENT == 0 and not recycle._buffers


def test_free_buffers_past_the_limit_or_idle_too_long_are_dropped(monkeypatch):
    size = 4000 * 4 + ALIGNMENT
    monkeypatch.setenv("LOWERKIT_RECYCLE_BYTES", str(2 * size))
    held = [recycled_empty((4000,), np.float32) for _ in range(4)]
    assert recycle.recycled_bytes() == (4 * size, 0)
    held.clear()
    other = recycled_empty((5000,), np.float32)  # another size: the four are free, two may stay
    assert recycle.recycled_bytes() == (other.nbytes + ALIGNMENT, 2 * size)
    del other
    for _ in range(recycle.IDLE_CALLS + 1):
        recycled_empty((5000,), np.float32)  # dies at once: claims that never take the 4000s
    assert recycle.recycled_bytes()[1] == 5000 * 4 + ALIGNMENT


def test_eight_threads_never_share_a_live_buffer():
    from tests.team_calls import from_threads

    def work(seed: int) -> list[bool]:
        kept = []
        for _ in range(200):
            array = recycled_empty((4000,), np.float32)
            array[:] = seed
            kept.append(bool(np.all(array == seed)))
        return kept

    results = from_threads(work)
    assert all(all(kept) for kept in results.values())
    assert recycle.recycled_bytes()[0] == 0 and len(recycle._buffers) <= 8


def test_release_drops_the_free_buffers_only():
    held = recycled_empty((4000,), np.float32)
    recycled_empty((5000,), np.float32)  # free at once
    assert recycle.release() == 5000 * 4 + ALIGNMENT
    assert recycle.recycled_bytes() == (held.nbytes + ALIGNMENT, 0)
    del held
    assert recycle.release() == 4000 * 4 + ALIGNMENT and not recycle._buffers


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_byte_count_is_an_input_error_naming_the_variable(monkeypatch, value):
    from lowerkit.errors import InputError

    monkeypatch.setenv("LOWERKIT_RECYCLE_BYTES", value)
    with pytest.raises(InputError, match=r"\$LOWERKIT_RECYCLE_BYTES must be a whole number of bytes"):
        recycled_empty((4000,), np.float32)
    assert recycled_empty((10,), np.float32).size == 10  # small arrays never read it
