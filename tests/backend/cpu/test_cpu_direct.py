"""Direct stems (lowerkit.backend.cpu.direct, kernels in jit.direct): ``act(conv(x, w) +
bias)`` against a float64 direct convolution over a sweep of geometries (strides 1-3, odd
sizes, uneven padding, partial panels, every tile width and partial tile kind, an activation with no IR
form), the team region equal to the serial kernel bit for bit, eight threads at once, the
rule, and both plugins running their stems direct against reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import direct, panels  # noqa: E402
from tests.backend.cpu.test_cpu_panels import ACTS, _code, _direct_conv  # noqa: E402
from tests.team_calls import from_threads, skip_without_team  # noqa: E402

# c, oc, h, w, kernel, stride, padding (top, left, bottom, right)
CASES = [
    (3, 32, 30, 30, 3, 2, (1, 1, 1, 1)),  # MobileNetV2's stem, small: 15x15 (a 9-15 column edge)
    (3, 64, 41, 39, 7, 2, (3, 3, 3, 3)),  # ResNet's, small: odd sizes, 6 panels of 6 + 4 rows
    (3, 13, 17, 37, 3, 1, (0, 2, 1, 0)),  # stride 1, uneven padding, 39 columns (a 4-8 column edge)
    (2, 7, 20, 52, 5, 3, (2, 2, 2, 2)),  # stride 3: three phases; 18 columns (a 1-3 column edge)
    (1, 5, 9, 16, 3, 2, (1, 0, 1, 1)),  # one channel, fewer rows than a panel
    (4, 24, 33, 35, 4, 2, (1, 2, 2, 1)),  # even kernel, an odd padded width for the pairs split
    (3, 8, 12, 12, 2, 2, (0, 0, 0, 0)),  # no padding, output 6x6
    (3, 16, 9, 230, 3, 2, (1, 1, 1, 1)),  # 115 columns: 64 + 32 + 16 + a 1-3 column edge
    (3, 10, 6, 200, 3, 1, (1, 1, 1, 1)),  # 200 columns: three 64-column tiles and a 4-8 column edge
]


def _case(case, seed=0, batch=1):
    c, oc, h, wd, k, stride, pad = CASES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = np.stack([_direct_conv(image, w, b, stride, pad) for image in x])
    form = direct.DirectConv.of(c, (k, k), (stride, stride), pad, want.shape[2:])
    return x, w, b, want, form


@pytest.mark.parametrize("act", ["none", "relu", "clip", "silu", "gelu"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_direct_matches_a_float64_convolution(case, act):
    x, w, b, want, form = _case(case, batch=2)
    out = np.full(want.shape, np.nan, np.float32)
    form.run(panels.PackedWeight.of(w, b), x, out, _code(act), form.new_phases())
    np.testing.assert_allclose(out, ACTS[act](want), rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_team_region_equals_the_serial_kernel(case):
    skip_without_team()
    x, w, b, want, form = _case(case, seed=3)
    packed = panels.PackedWeight.of(w, b)
    serial = np.empty(want.shape, np.float32)
    form.run(packed, x, serial, _code("relu"), form.new_phases())
    for _ in range(20):  # the phases start as NaN: a band reading another's before it is written shows
        team, phases = np.full(want.shape, np.nan, np.float32), np.full(form.phases_shape, np.nan, np.float32)
        form.run_team(packed, x[0], team[0], _code("relu"), phases, 2)
        np.testing.assert_array_equal(team, serial)


def test_direct_from_eight_threads():
    x, w, b, want, form = _case(1, seed=5, batch=8)
    packed = panels.PackedWeight.of(w, b)
    want = ACTS["relu"](want)

    def call(i):
        phases, outs = form.new_phases(), []
        for _ in range(10):
            out = np.empty(want.shape[1:], np.float32)[None]
            form.run(packed, x[i : i + 1], out, _code("relu"), phases)
            outs.append(out[0])
        return outs

    results = from_threads(call)
    for i in range(8):
        for got in results[i]:
            np.testing.assert_allclose(got, want[i], rtol=1e-4, atol=1e-3)


def test_the_rule_takes_undilated_convolutions_of_few_channels():
    assert direct.fits(3, (7, 7), (2, 2), (1, 1), (112, 112)) and direct.fits(3, (3, 3), (2, 2), (1, 1), (112, 112))
    assert not direct.fits(8, (3, 3), (2, 2), (1, 1), (112, 112))  # more channels: im2col's GEMM
    assert not direct.fits(3, (3, 3), (1, 1), (2, 2), (112, 112))  # dilated
    assert not direct.fits(4, (9, 9), (1, 1), (1, 1), (112, 112))  # 324 rows of columns
    assert not direct.fits(3, (1, 1), (2, 2), (1, 1), (112, 112))  # phases larger than the columns


def test_the_rule_leaves_full_width_avx512_to_sgemm(monkeypatch):
    monkeypatch.setattr(panels, "_RULES", ["avx512"])
    assert not direct.fits(3, (7, 7), (2, 2), (1, 1), (112, 112))


def test_the_tap_table_points_at_each_tap_of_the_first_output_row():
    shape = direct.phases_shape(2, (3, 3), (2, 2), (5, 7))
    assert shape == (2, 11, 2, 7 + 1 + direct.SLACK)
    phases = np.arange(np.prod(shape)).reshape(shape)
    taps = direct.tap_table(shape, (3, 3))
    assert [phases.reshape(-1)[t] for t in taps] == [phases[c, i, j % 2, j // 2] for c in range(2) for i in range(3)
                                                     for j in range(3)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
@pytest.mark.parametrize("batch", [1, 2])
def test_plugins_run_their_stems_direct(monkeypatch, backend, batch, threads):
    """A stem of 3 input channels runs direct (image by image on one thread, or one team
    region per image) and the model matches reference."""
    import lowerkit as lk
    from lowerkit import nn

    if threads > 1:
        skip_without_team()
    calls = []
    for name in ("run", "run_team"):
        real = getattr(direct.DirectConv, name)
        monkeypatch.setattr(direct.DirectConv, name,
                            lambda self, *a, _real=real, _name=name: (calls.append(_name), _real(self, *a))[1])
    net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU6(), nn.Conv2d(16, 8, 1))
    x = np.random.default_rng(2).standard_normal((batch, 3, 96, 96)).astype(np.float32)
    module = lk.trace(net, x)
    got = lk.to_backend(module, backend, {"forward": {"threads": threads}})(x)
    want = lk.to_backend(module, "reference")(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    assert calls and set(calls) <= {"run", "run_team"}
