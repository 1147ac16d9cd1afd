"""The blocked depthwise kernel (lowerkit.backend.cpu.jit.dwblock) against a float64 direct
convolution: 3x3, 5x5 and 7x7 kernels, strides 1 and 2, symmetric, uneven, zero and wide
padding, planes from 1x1 to 23x17 (fewer than 8 pixels in or out, rows of 1-3, 4-7 and 8+
outputs), channel counts that leave partial blocks, batches of 2, bands that start and end
inside a block, bias or none, fused activations; planes outside the band are not written."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import jit  # noqa: E402
from lowerkit.backend.cpu.jit.depthwise import NO_MEANS  # noqa: E402


def _direct(x, w, bias, stride, padding):
    """float64 depthwise convolution; ``padding`` (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    k = w.shape[2]
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = (h + pt + pb - k) // stride + 1, (wd + pl + pr - k) // stride + 1
    out = np.zeros((n, c, oh, ow))
    for a in range(k):
        for b in range(k):
            window = xp[:, :, a : a + stride * (oh - 1) + 1 : stride, b : b + stride * (ow - 1) + 1 : stride]
            out += window * w[:, 0, a, b].astype(np.float64)[None, :, None, None]
    if bias.size:
        out += bias.astype(np.float64)[None, :, None, None]
    return out


# (batch, channels, height, width, kernel, stride, padding top/left/bottom/right)
CASES = [
    (1, 16, 14, 14, 5, 1, (2, 2, 2, 2)),
    (1, 16, 14, 14, 5, 2, (1, 2, 2, 1)),  # uneven padding (ONNX models carry it)
    (2, 13, 7, 7, 5, 1, (2, 2, 2, 2)),  # a partial block; 7-wide rows (one group of 7)
    (1, 12, 14, 14, 3, 2, (1, 1, 1, 1)),  # stride 2 onto 7x7 (groups of 7)
    (1, 10, 7, 7, 7, 1, (3, 3, 3, 3)),  # a 7x7 window over 7-wide rows
    (1, 9, 6, 6, 3, 1, (1, 1, 1, 1)),  # 6-wide rows (groups of 4, overlapped)
    (1, 24, 23, 17, 3, 2, (1, 1, 1, 1)),  # odd sides; 12 x 9 outputs (groups of 8, overlapped)
    (2, 9, 9, 6, 3, 1, (0, 0, 0, 0)),  # no padding
    (1, 8, 2, 3, 3, 1, (1, 1, 1, 1)),  # 6 pixels: lane by lane in and out
    (1, 8, 4, 4, 3, 2, (1, 1, 1, 1)),  # 16 pixels in, 4 out; rows of 2 (one pixel at a time)
    (1, 5, 1, 1, 7, 1, (3, 3, 3, 3)),  # one pixel, all but the centre tap on padding
    (2, 20, 11, 12, 7, 2, (3, 3, 3, 3)),
    (1, 11, 16, 10, 7, 1, (3, 2, 1, 4)),
    (1, 7, 12, 9, 5, 2, (0, 0, 0, 0)),  # the last input row and column lie past every window
    (1, 3, 6, 5, 3, 1, (2, 2, 2, 2)),  # padding wider than the window reaches: output grows
]
ACTS = [("none", {}), ("relu", {}), ("silu", {}), ("clip", {"act_min": -0.5, "act_max": 0.5})]
_ACT_FN = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "silu": lambda v: v / (1 + np.exp(-v)),
           "clip": lambda v: np.clip(v, -0.5, 0.5)}


def depthwise_case(case: int, spec, acts=ACTS, act_fns=_ACT_FN):
    """Case ``case`` of a sweep, ``spec`` (batch, channels, height, width, kernel, stride, padding):
    its input, weight, bias (every other case none), activation (code, p0, p1; the cases take
    ``acts`` in turn) and the float64 direct convolution activated by ``act_fns``."""
    n, c, h, wd, k, stride, padding = spec
    rng = np.random.default_rng(case)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32) if case % 2 == 0 else np.empty(0, np.float32)
    name, extra = acts[case % len(acts)]
    act = jit.activation_code({"act": name, **extra})
    return x, w, bias, act, act_fns[name](_direct(x, w, bias, stride, padding))


@pytest.mark.parametrize("made", [False, True], ids=["gathered-weights", "blocked-weights"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_blocked_depthwise_matches_direct_convolution(case, made):
    """Every band, with the weights gathered per block or laid out once (``blocked_weights``:
    used by blocks that start on a multiple of 8 channels; the band from plane 3 gathers)."""
    from lowerkit.backend.cpu.jit.depthwise import NO_BLOCKS, blocked_weights
    from lowerkit.backend.cpu.jit.dwblock import blocked_scratch, blocked_table

    n, c, h, wd, k, stride, padding = CASES[case]
    x, w, bias, (code, p0, p1), expected = depthwise_case(case, CASES[case])
    out_hw = expected.shape[2:]
    geometry = ((h, wd), out_hw, k, stride, padding[:2])
    table, floats = blocked_table(*geometry), blocked_scratch(*geometry)
    conv = jit.load("conv")
    blocks = blocked_weights(w, bias) if made else NO_BLOCKS
    planes = n * c
    bands = [(0, planes), (min(3, planes - 1), max(planes - 2, min(3, planes - 1) + 1))]
    for first, last in bands:
        got = np.full((n, c, *out_hw), np.nan, np.float32)
        conv.depthwise_blocked(x, w, bias, blocks, table, np.full(floats, np.nan, np.float32), got, NO_MEANS, stride, padding[0],
                               padding[1], code, p0, p1, first, last)
        flat, ref = got.reshape(planes, -1), expected.reshape(planes, -1)
        np.testing.assert_allclose(flat[first:last], ref[first:last], rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
        assert np.isnan(flat[:first]).all() and np.isnan(flat[last:]).all()  # nothing outside the band


def test_blocked_depthwise_from_eight_threads():
    """One scratch per thread, one shared table, weights and input: calls on 8 threads at once agree."""
    from concurrent.futures import ThreadPoolExecutor

    from lowerkit.backend.cpu.jit.depthwise import blocked_weights

    from lowerkit.backend.cpu.jit.dwblock import blocked_scratch, blocked_table

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 40, 14, 14)).astype(np.float32)
    w = rng.standard_normal((40, 1, 5, 5)).astype(np.float32)
    bias = np.empty(0, np.float32)
    geometry = ((14, 14), (7, 7), 5, 2, (2, 2))
    table, floats = blocked_table(*geometry), blocked_scratch(*geometry)
    blocks = blocked_weights(w, bias)
    conv = jit.load("conv")

    def run(_):
        out = np.empty((1, 40, 7, 7), np.float32)
        conv.depthwise_blocked(x, w, bias, blocks, table, np.empty(floats, np.float32), out, NO_MEANS, 2, 2, 2, 0, 0.0, 0.0, 0, 40)
        return out

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(32)))
    expected = _direct(x, w, bias, 2, (2, 2, 2, 2))
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
