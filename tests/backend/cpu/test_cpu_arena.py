"""pack_lifetimes: the static memory plan both CPU plugins use."""

from __future__ import annotations

import numpy as np

from lowerkit.backend.cpu import ALIGNMENT, pack_lifetimes


def test_buffers_alive_together_never_share_a_byte():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lifetimes = []
        for _ in range(int(rng.integers(1, 30))):
            first = int(rng.integers(0, 40))
            lifetimes.append((first, first + int(rng.integers(0, 10)), int(rng.integers(1, 5000))))
        offsets, size = pack_lifetimes(lifetimes)
        assert len(offsets) == len(lifetimes)
        for (f, l, n), o in zip(lifetimes, offsets):
            assert o % ALIGNMENT == 0 and o + n <= size
        for i, (fa, la, na) in enumerate(lifetimes):
            for j, (fb, lb, nb) in enumerate(lifetimes[:i]):
                if fa <= lb and fb <= la:  # alive at a common time (ends included)
                    assert offsets[i] + na <= offsets[j] or offsets[j] + nb <= offsets[i]


def test_buffers_alive_apart_share_memory_and_gaps_are_filled_best_fit():
    offsets, size = pack_lifetimes([(0, 1, 256), (2, 3, 256), (0, 3, 128)])
    assert offsets[0] == offsets[1]  # never alive together: one place
    assert size == 384
    # At times 4-5 the 192-byte buffer (times 3-4) sits at [256, 448) and the 64-byte one
    # (times 2-5) at [512, 576): of the free gaps [0, 256) and [448, 512) the last buffer
    # takes the tighter one.
    offsets, _ = pack_lifetimes([(0, 3, 256), (2, 2, 256), (4, 5, 64), (2, 5, 64), (3, 4, 192)])
    assert offsets == [0, 256, 448, 512, 256]
    _, top = pack_lifetimes([(0, 0, 100)], alignment=64)
    assert top == 128  # sizes round up to the alignment
