"""The compiled 3x3 max pool (``lowerkit.backend.cpu.jit.pool.max_pool3x3``) against a numpy
window maximum, and where it applies (``select.max_pool3x3_fits``)."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu.jit.select import max_pool3x3_fits

pytest.importorskip("numba")


def _numpy_max_pool(x, stride, pads, out_hw):
    pt, pl, pb, pr = pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, max(pb, 0)), (pl, max(pr, 0))), constant_values=-np.inf)
    oh, ow = out_hw
    out = np.full(x.shape[:2] + (oh, ow), -np.inf, np.float32)
    for i in range(3):
        for j in range(3):
            out = np.maximum(out, xp[:, :, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride])
    return out


@pytest.mark.parametrize("h, w, stride, pt, pl, ceil", [
    (112, 112, 2, 1, 1, False), (11, 10, 2, 1, 1, False), (12, 13, 2, 1, 1, True), (7, 9, 1, 1, 1, False),
    (8, 5, 2, 0, 0, False), (1, 1, 1, 1, 1, False), (2, 3, 2, 1, 0, True), (6, 6, 1, 2, 2, False),
    (5, 4, 2, 2, 1, False), (3, 3, 1, 0, 0, False),
])
def test_max_pool3x3_matches_numpy(h, w, stride, pt, pl, ceil):
    from lowerkit.backend.cpu import jit

    def out_size(n, pad):
        span = n + 2 * pad - 3
        return (-(-span // stride) if ceil else span // stride) + 1

    oh, ow = out_size(h, pt), out_size(w, pl)
    pads = (pt, pl, (oh - 1) * stride + 3 - h - pt, (ow - 1) * stride + 3 - w - pl)
    assert max_pool3x3_fits((3, 3), (stride, stride), (pt, pl), (1, 1), (h, w), (oh, ow))
    x = np.random.default_rng(h * w).standard_normal((2, 3, h, w)).astype(np.float32)
    out = np.full((2, 3, oh, ow), np.nan, np.float32)
    k = jit.load("pool")
    k.max_pool3x3(x, out, stride, pt, pl, 0, 4)  # planes [0, 4) of 6, then the rest
    k.max_pool3x3(x, out, stride, pt, pl, 4, 6)
    np.testing.assert_array_equal(out, _numpy_max_pool(x, stride, pads, (oh, ow)))


@pytest.mark.parametrize("kernel, stride, padding, dilation, in_hw, out_hw", [
    ((3, 2), (2, 2), (1, 1), (1, 1), (8, 8), (4, 4)),  # not 3x3
    ((3, 3), (3, 3), (1, 1), (1, 1), (9, 9), (3, 3)),  # stride 3
    ((3, 3), (2, 1), (1, 1), (1, 1), (8, 8), (4, 8)),  # unequal strides
    ((3, 3), (1, 1), (1, 1), (2, 2), (8, 8), (6, 6)),  # dilated
    ((3, 3), (1, 1), (3, 3), (1, 1), (4, 4), (8, 8)),  # windows wholly on padding
    ((3, 3), (2, 2), (0, 0), (1, 1), (4, 4), (4, 4)),  # bottom padding of 5 rows
])
def test_max_pool3x3_declines_other_windows(kernel, stride, padding, dilation, in_hw, out_hw):
    assert not max_pool3x3_fits(kernel, stride, padding, dilation, in_hw, out_hw)
