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
