"""aligned_empty: arrays whose data starts on a cache line; aligned_buffer finds the byte
buffer such an array owns whole, and nothing for any other array."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import ALIGNMENT, aligned_buffer, aligned_empty


@pytest.mark.parametrize("shape", [(1,), (3, 5), (1, 144, 56, 56), (7, 1, 3), 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    array = aligned_empty(shape, dtype)
    expected_shape = (shape,) if isinstance(shape, int) else shape
    assert array.shape == expected_shape and array.dtype == dtype
    assert array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % ALIGNMENT == 0
    array[...] = 1  # all of it is writable memory of its own
    assert aligned_buffer(array) is array.base
    assert array.base.nbytes == array.nbytes + ALIGNMENT


def test_aligned_buffer_is_none_for_other_arrays():
    array = aligned_empty((4, 6))
    assert aligned_buffer(array[1:]) is None  # part of it
    assert aligned_buffer(array[:, :3]) is None  # not contiguous
    assert aligned_buffer(np.empty((4, 6), np.float32)) is None  # numpy's own
    assert aligned_buffer(np.empty(30, np.float32)[2:26].reshape(4, 6)) is None  # a view of someone else's
    assert aligned_buffer(array.reshape(-1)) is array.base  # all of it, another shape
