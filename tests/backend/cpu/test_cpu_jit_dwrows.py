"""The rows depthwise kernel (lowerkit.backend.cpu.jit.dwrows) against a float64 direct
convolution: 3x3, 5x5 and 7x7 kernels at stride 1, 3x3 at stride 2, symmetric, uneven, zero and wide padding,
rows narrower than a vector, of exactly one, and across two or three; heights below, at and
past a group of rows; batches of 2, bands, bias or none, the activations in registers and one
applied after each plane (GELU); the planes' means; planes outside the band not written; the
same bits as the blocked kernel; eight threads at once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from tests.backend.cpu.test_cpu_jit_dwblock import depthwise_case  # noqa: E402

from lowerkit.backend.cpu import jit  # noqa: E402
from lowerkit.backend.cpu.jit.depthwise import NO_MEANS  # noqa: E402

# (batch, channels, height, width, kernel, stride, padding top/left/bottom/right)
CASES = [
    (1, 16, 14, 14, 3, 1, (1, 1, 1, 1)),  # one vector a row on 16 lanes, two groups of 7 rows
    (2, 13, 28, 28, 3, 1, (1, 1, 1, 1)),  # two vectors a row, the second partial
    (1, 9, 14, 14, 5, 1, (2, 2, 2, 2)),
    (1, 5, 17, 33, 5, 1, (2, 2, 2, 2)),  # 33 wide: a vector of one column at the end; 17 = 2 x 7 + 3 rows
    (1, 6, 20, 16, 7, 1, (3, 3, 3, 3)),  # exactly one vector a row; 20 = 2 x 8 + 4 rows
    (2, 4, 5, 12, 3, 1, (1, 1, 1, 1)),  # fewer rows than a group
    (1, 3, 9, 40, 7, 1, (3, 2, 1, 4)),  # uneven padding (ONNX models carry it)
    (1, 7, 12, 14, 3, 1, (0, 0, 0, 0)),  # no padding: 10 x 12 outputs
    (1, 3, 6, 12, 3, 1, (2, 2, 2, 2)),  # padding wider than the window reaches: output grows
    (1, 8, 1, 20, 5, 1, (2, 2, 2, 2)),  # a single row, above and below it zero rows
    (1, 4, 15, 5, 3, 1, (1, 1, 1, 1)),  # rows narrower than 8 lanes
    (2, 12, 28, 28, 3, 2, (1, 1, 1, 1)),  # stride 2: 14 x 14 out, one vector a row from two
    (1, 5, 57, 66, 3, 2, (1, 1, 1, 1)),  # odd height; 33 wide out: three vectors, the last of one column
    (1, 6, 30, 35, 3, 2, (1, 1, 1, 1)),  # odd width
    (1, 4, 20, 24, 3, 2, (1, 0, 2, 2)),  # uneven padding at stride 2
    (2, 3, 16, 16, 3, 2, (0, 0, 1, 1)),  # bottom/right padding only (the TF "same" of an even side)
]
ACTS = [("none", {}), ("relu", {}), ("silu", {}), ("clip", {"act_min": -0.5, "act_max": 0.5}),
        ("hardswish", {}), ("gelu", {})]
_ACT_FN = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "silu": lambda v: v / (1 + np.exp(-v)),
           "clip": lambda v: np.clip(v, -0.5, 0.5), "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
           "gelu": lambda v: 0.5 * v * (1 + _erf(v / np.sqrt(2)))}


def _erf(v):
    from math import erf

    return np.vectorize(erf)(v)


def _run(case, first=None, last=None):
    from lowerkit.backend.cpu.jit.dwrows import rows_scratch

    n, c, h, wd, k, stride, padding = CASES[case]
    x, w, bias, (code, p0, p1), expected = depthwise_case(case, CASES[case], ACTS, _ACT_FN)
    planes = n * c
    first, last = (0, planes) if first is None else (first, last)
    got = np.full(expected.shape, np.nan, np.float32)
    means = np.full(planes, np.nan, np.float32)
    scratch = np.full(rows_scratch((h, wd), expected.shape[2:], k, stride), np.nan, np.float32)  # zeroed by the kernel
    jit.load("conv").depthwise_rows(x, w, bias, scratch, got, means, stride, padding[0], padding[1], code, p0, p1,
                                    first, last)
    return (x, w, bias, code, p0, p1), got, means, expected


@pytest.mark.parametrize("case", range(len(CASES)))
def test_rows_depthwise_matches_direct_convolution(case):
    n, c = CASES[case][:2]
    planes = n * c
    for first, last in [(0, planes), (min(3, planes - 1), max(planes - 2, min(3, planes - 1) + 1))]:
        _, got, means, expected = _run(case, first, last)
        flat, ref = got.reshape(planes, -1), expected.reshape(planes, -1)
        np.testing.assert_allclose(flat[first:last], ref[first:last], rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
        assert np.isnan(flat[:first]).all() and np.isnan(flat[last:]).all()  # nothing outside the band
        np.testing.assert_allclose(means[first:last], flat[first:last].mean(axis=1), rtol=1e-5, atol=1e-6)
        assert np.isnan(means[:first]).all() and np.isnan(means[last:]).all()


@pytest.mark.parametrize("case", [0, 1, 2, 4, 6, 11, 13, 14])
def test_rows_depthwise_gives_the_blocked_kernels_bits(case):
    """Each output adds its taps to the bias in the blocked kernel's order."""
    from lowerkit.backend.cpu.jit.depthwise import blocked_weights
    from lowerkit.backend.cpu.jit.dwblock import blocked_scratch, blocked_table

    (x, w, bias, code, p0, p1), got, _, expected = _run(case)
    n, c, h, wd, k, stride, padding = CASES[case]
    geometry = ((h, wd), expected.shape[2:], k, stride, padding[:2])
    blocked = np.empty_like(got)
    jit.load("conv").depthwise_blocked(x, w, bias, blocked_weights(w, bias), blocked_table(*geometry),
                                       np.empty(blocked_scratch(*geometry), np.float32), blocked, NO_MEANS, stride,
                                       padding[0], padding[1], code, p0, p1, 0, n * c)
    np.testing.assert_array_equal(got, blocked)


def test_rows_depthwise_refuses_a_variant_it_has_no_routine_for():
    """5x5 at stride 2 has no routine (``jit.select`` never asks for one): an error, not a plane
    left unwritten."""
    from lowerkit.backend.cpu.jit.dwrows import rows_scratch

    x, w = np.zeros((1, 2, 20, 20), np.float32), np.zeros((2, 1, 5, 5), np.float32)
    out, scratch = np.zeros((1, 2, 10, 10), np.float32), np.empty(rows_scratch((20, 20), (10, 10), 5, 2), np.float32)
    with pytest.raises(ValueError, match="no routine"):
        jit.load("conv").depthwise_rows(x, w, np.empty(0, np.float32), scratch, out, NO_MEANS, 2, 2, 2, 0, 0.0, 0.0, 0,
                                        2)


@pytest.mark.parametrize("case", [1, 11])
def test_rows_depthwise_on_a_team_gives_the_serial_bits(case):
    from tests.team_calls import skip_without_team

    from lowerkit.backend.cpu import make_team
    from lowerkit.backend.cpu.jit.dwrows import rows_scratch

    skip_without_team()
    (x, w, bias, code, p0, p1), serial, means, _ = _run(case)
    stride, padding = CASES[case][5:]
    team = make_team(2)
    got, got_means = np.empty_like(serial), np.empty_like(means)
    scratch = np.empty((2, rows_scratch(x.shape[2:], serial.shape[2:], w.shape[2], stride)), np.float32)
    team.kernels().depthwise_rows(x, w, bias, scratch, got, got_means, stride, padding[0], padding[1], code, p0, p1, 2)
    np.testing.assert_array_equal(got, serial)
    np.testing.assert_array_equal(got_means, means)


def test_rows_depthwise_from_eight_threads():
    """One scratch per thread; shared weights and input: calls on 8 threads at once agree."""
    from tests.team_calls import from_threads

    from lowerkit.backend.cpu.jit.dwrows import rows_scratch

    x, w, bias, _, expected = depthwise_case(2, (1, 40, 28, 28, 5, 1, (2, 2, 2, 2)), [("none", {})])
    conv, floats = jit.load("conv"), rows_scratch((28, 28), (28, 28), 5)

    def calls(_):
        outs = [np.empty((1, 40, 28, 28), np.float32) for _ in range(4)]
        for out in outs:
            conv.depthwise_rows(x, w, bias, np.empty(floats, np.float32), out, NO_MEANS, 1, 2, 2, 0, 0.0, 0.0, 0, 40)
        return outs

    for outs in from_threads(calls).values():
        for got in outs:
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
