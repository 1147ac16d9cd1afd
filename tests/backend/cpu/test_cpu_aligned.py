"""aligned_empty: arrays whose data starts on a cache line, each in a byte buffer of its own."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import ALIGNMENT, aligned_empty


@pytest.mark.parametrize("shape", [(1,), (3, 5), (1, 144, 56, 56), (7, 1, 3), 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    array = aligned_empty(shape, dtype)
    expected_shape = (shape,) if isinstance(shape, int) else shape
    assert array.shape == expected_shape and array.dtype == dtype
    assert array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % ALIGNMENT == 0
    array[...] = 1  # all of it is writable memory of its own
    assert array.base.nbytes == array.nbytes + ALIGNMENT


def test_a_thread_buffer_grows_once_is_reused_and_is_the_thread_s_own():
    import threading

    from lowerkit.backend.cpu.aligned import thread_buffer

    first = thread_buffer("test_buffer", 100)
    assert first.size >= 100 and first.dtype == np.float32 and first.ctypes.data % ALIGNMENT == 0
    assert thread_buffer("test_buffer", 50) is first  # smaller: the same one
    grown = thread_buffer("test_buffer", 1000)
    assert grown is not first and grown.size >= 1000 and thread_buffer("test_buffer", 1000) is grown
    other = []
    worker = threading.Thread(target=lambda: other.append(thread_buffer("test_buffer", 10)))
    worker.start()
    worker.join()
    assert other[0] is not grown
