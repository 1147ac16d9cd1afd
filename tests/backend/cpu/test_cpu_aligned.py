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


@pytest.mark.parametrize("nbytes", [0, 1, 64, 4096, 112_896])
def test_aligned_buffer_holds_nbytes_from_its_first_cache_line(nbytes):
    from lowerkit.backend.cpu import aligned_buffer

    raw, offset = aligned_buffer(nbytes)
    assert raw.dtype == np.uint8 and raw.nbytes == nbytes + ALIGNMENT
    assert 0 <= offset < ALIGNMENT and (raw.ctypes.data + offset) % ALIGNMENT == 0
    raw[offset:offset + nbytes] = 7  # inside the buffer


def test_aligned_empty_of_no_elements_and_of_a_scalar():
    assert aligned_empty((0, 3)).shape == (0, 3)
    scalar = aligned_empty(())
    scalar[...] = 2.5
    assert scalar.shape == () and float(scalar) == 2.5 and scalar.ctypes.data % ALIGNMENT == 0
