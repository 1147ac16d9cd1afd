"""Direct convolution with the output channels in the vector lanes
(lowerkit.backend.cpu.channel_direct, kernels in jit.channel_direct): ``act(conv(x, w) + bias
[+ residual])`` against a float64 convolution over a sweep of geometries (strides 1-3, odd
sizes, uneven padding, dilation, no padding at all, a partial last strip of channels, pixels
that leave a partial tile, inner dimensions past one block, a map whose tiles split between
threads in several groups each), every activation kind, the team region equal to the serial
kernel bit for bit, the sum in the panel GEMM's order, eight
threads at once, the rule, and both plugins running such layers against reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import aligned, channel_direct, jit, panels  # noqa: E402
from tests.backend.cpu.test_cpu_panels import ACTS, _code  # noqa: E402
from tests.team_calls import from_threads, skip_without_team  # noqa: E402

# c, oc, h, w, kernel (kh, kw), stride (sh, sw), padding (top, left, bottom, right), dilation
CASES = [
    (64, 128, 20, 22, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # ResNet's 3x3/2, small
    (40, 64, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # a 7x7 map: whole tiles of 7 pixels
    (37, 70, 13, 11, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # odd channels: a 6-channel last strip
    (30, 100, 15, 17, (3, 5), (2, 1), (0, 2, 1, 2), (1, 2)),  # uneven padding, dilation, stride (2, 1)
    (40, 33, 9, 9, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),  # no padding: the image read in place
    (33, 129, 10, 12, (5, 5), (3, 2), (2, 2, 2, 2), (1, 1)),  # stride 3, 825 rows of columns (4 blocks)
    (300, 16, 5, 6, (2, 2), (1, 1), (0, 1, 1, 0), (1, 1)),  # 1200 rows, 16 channels, padding right only
    (24, 40, 40, 38, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 254 tiles: each thread's band spans groups
]


def _reference(x, w, b, stride, pad, dilation):
    """float64 convolution of ``x`` [N, C, H, W] (padding top, left, bottom, right)."""
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.zeros((n, c, h + pad[0] + pad[2], wd + pad[1] + pad[3]))
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow)) + b[None, :, None, None]
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j].astype(np.float64))
    return out


def _case(case, seed=0, batch=1):
    c, oc, h, wd, kernel, stride, pad, dilation = CASES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((oc, c, *kernel)) / np.sqrt(c * kernel[0] * kernel[1])).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = _reference(x, w, b, stride, pad, dilation)
    form = channel_direct.ChannelDirectConv.of((c, h, wd), kernel, stride, pad, dilation, want.shape[2:])
    return x, w, b, want, form


def _padded(form):
    return np.full(form.padded_shape, np.nan, np.float32) if form.pads else None


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("act", ["none", "relu", "clip", "silu", "gelu"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_a_float64_convolution(case, act):
    x, w, b, want, form = _case(case, batch=2)
    out = np.full(want.shape, np.nan, np.float32)
    form.run(channel_direct.StripWeight.of(w, b), x, out, _code(act), _padded(form))
    _close(out, ACTS[act](want))


@pytest.mark.parametrize("act", ["none", "relu", "gelu"])  # none, in the tiles, after them (act_span)
@pytest.mark.parametrize("case", [0, 2, 3])
def test_a_residual_is_added_once_before_the_activation(case, act):
    x, w, b, want, form = _case(case, seed=1, batch=2)
    residual = np.random.default_rng(7).standard_normal(want.shape).astype(np.float32)
    out = np.full(want.shape, np.nan, np.float32)
    form.run(channel_direct.StripWeight.of(w, b), x, out, _code(act), _padded(form), residual)
    _close(out, ACTS[act](want + residual))


def test_without_a_bias_the_sum_starts_from_zero():
    x, w, b, want, form = _case(2)
    out = np.empty(want.shape, np.float32)
    form.run(channel_direct.StripWeight.of(w, None), x, out, _code("none"), _padded(form))
    _close(out, want - b[None, :, None, None])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_team_region_equals_the_serial_kernel(case):
    skip_without_team()
    x, w, b, want, form = _case(case, seed=3)
    weight = channel_direct.StripWeight.of(w, b)
    residual = np.random.default_rng(4).standard_normal(want.shape).astype(np.float32)
    serial = np.empty(want.shape, np.float32)
    form.run(weight, x, serial, _code("relu"), _padded(form), residual)
    for ways in (2, 3):
        for _ in range(10):  # the padded image starts as NaN: a thread reading rows before they are written shows
            team = np.full(want.shape, np.nan, np.float32)
            form.run_team(weight, x[0], team[0], _code("relu"), _padded(form), ways, residual[0])
            np.testing.assert_array_equal(team, serial)


def test_the_sum_runs_in_the_panel_gemm_s_order():
    """The same bits as im2col then the panel GEMM (the layers' form before): bias first, then
    the inner dimension in order, one fused multiply-add a step."""
    from lowerkit.backend.cpu.jit import load

    x, w, b, want, form = _case(5)
    out = np.empty(want.shape, np.float32)
    form.run(channel_direct.StripWeight.of(w, b), x, out, _code("relu"), _padded(form))
    c, oc, _, _, (kh, kw), (sh, sw), pad, (dh, dw) = CASES[5]
    oh, ow = want.shape[2:]
    cols = np.empty((c * kh * kw, oh, ow), np.float32)
    load("conv").im2col(x[0], cols, kh, kw, sh, sw, pad[0], pad[1], dh, dw, 0, oh)
    gemm = np.empty((oc, oh * ow), np.float32)
    panels.PackedWeight.of(w, b).run(cols.reshape(c * kh * kw, -1), gemm, _code("relu"))
    np.testing.assert_array_equal(out.reshape(oc, -1), gemm)


def test_writes_only_the_output():
    x, w, b, want, form = _case(2)
    frame = np.full((3, *want.shape[1:]), np.nan, np.float32)  # the output between two guards
    form.run(channel_direct.StripWeight.of(w, b), x, frame[1:2], _code("none"), _padded(form))
    assert np.isnan(frame[0]).all() and np.isnan(frame[2]).all()
    _close(frame[1:2], want)


def test_from_eight_threads():
    x, w, b, want, form = _case(0, seed=5, batch=8)
    weight = channel_direct.StripWeight.of(w, b)
    want = ACTS["relu"](want)

    def call(i):
        padded, outs = _padded(form), []
        for _ in range(5):
            out = np.empty(want.shape[1:], np.float32)[None]
            form.run(weight, x[i: i + 1], out, _code("relu"), padded)
            outs.append(out[0])
        return outs

    results = from_threads(call)
    for i in range(8):
        for got in results[i]:
            _close(got, want[i])


def test_steady_calls_keep_their_partial_sums_buffer():
    x, w, b, want, form = _case(0)
    weight, out, padded = channel_direct.StripWeight.of(w, b), np.empty(want.shape, np.float32), _padded(form)
    form.run(weight, x, out, _code("relu"), padded)
    buffer = aligned.thread_buffer("channel_partials", 0)
    for _ in range(3):
        form.run(weight, x, out, _code("relu"), padded)
    assert aligned.thread_buffer("channel_partials", 0) is buffer


def test_the_strips_and_the_bias_start_on_a_cache_line():
    strip = jit.load("channel_direct").STRIP  # 64 channels with 32 vector registers, 16 with 16
    weight = channel_direct.StripWeight.of(np.ones((70, 37, 3, 3), np.float32), np.ones(70, np.float32))
    count = -(-70 // strip)
    assert weight.strips.ctypes.data % 64 == 0 and weight.bias.ctypes.data % 64 == 0
    assert weight.strips.size == count * strip * 37 * 9 and (weight.bias[70:] == 0).all()
    last = 70 - (count - 1) * strip
    assert (weight.strips.reshape(count, 37 * 9, strip)[-1, :, last:] == 0).all()  # channels past 70: zero


def test_the_rule(monkeypatch):
    monkeypatch.setattr(panels, "_RULES", ["wide"])
    assert channel_direct.fits(64, (3, 3)) and channel_direct.fits(512, (3, 3))
    assert not channel_direct.fits(512, (1, 1))  # 1x1: the panel GEMM on the image
    assert not channel_direct.fits(3, (7, 7))  # a stem: jit.direct
    assert not channel_direct.fits(16, (3, 3))  # 144 rows of columns
    assert not channel_direct.fits(64, (3, 3), groups=2)
    monkeypatch.setenv(channel_direct.SWITCH_ENV, "0")
    assert not channel_direct.fits(64, (3, 3))
    monkeypatch.delenv(channel_direct.SWITCH_ENV)
    assert channel_direct.fits(64, (3, 3), stride=(2, 2))
    monkeypatch.setattr(panels, "_RULES", ["avx2"])  # 16 vector registers: the narrow tile, strided layers only
    assert channel_direct.fits(64, (3, 3), stride=(2, 2)) and channel_direct.fits(512, (3, 3), stride=(2, 1))
    assert not channel_direct.fits(512, (3, 3)) and not channel_direct.fits(16, (3, 3), stride=(2, 2))
    monkeypatch.setattr(panels, "_RULES", ["avx512"])  # full-width AVX-512 without the wide tile: unmeasured
    assert not channel_direct.fits(64, (3, 3))


def test_a_team_form_of_a_layer_of_many_channels_runs_here_given_the_image_size(monkeypatch):
    from lowerkit.backend.cpu.team_layers import DenseTeamForm

    monkeypatch.setattr(panels, "_RULES", ["wide"])
    form = DenseTeamForm.of(128, 64 * 9, (3, 3), (2, 2), (1,) * 4, (1, 1), (28, 28), 2, in_hw=(56, 56))
    assert form.channel is not None and form.fuses_residual and form.cols_shape == (1, 64 * 57 * 57)  # rows and columns as far as the taps reach
    assert isinstance(form.pack(np.ones((128, 64 * 9), np.float32), np.zeros(128, np.float32)),
                      channel_direct.StripWeight)
    assert DenseTeamForm.of(128, 64 * 9, (3, 3), (2, 2), (1,) * 4, (1, 1), (28, 28), 2).channel is None  # no size


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
@pytest.mark.parametrize("batch", [1, 2])
def test_plugins_run_such_layers_here(monkeypatch, backend, batch, threads):
    """A 3x3/2 layer and a residual block of 64 channels run here (image by image on one
    thread — nnpack's implicit GEMM —, or as team regions per image) and the model matches
    reference."""
    import lowerkit as lk
    from lowerkit import nn

    if threads > 1:
        skip_without_team()
    monkeypatch.setattr(panels, "_RULES", ["wide"])
    calls = []
    for name in ("run", "run_team"):
        real = getattr(channel_direct.ChannelDirectConv, name)
        monkeypatch.setattr(channel_direct.ChannelDirectConv, name,
                            lambda self, *a, _real=real, _name=name: (calls.append(_name), _real(self, *a))[1])

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Conv2d(32, 64, 3, stride=2, padding=1)
            self.conv = nn.Conv2d(64, 64, 3, padding=1)
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.relu(self.down(x))
            return self.relu(self.conv(y) + y)

    x = np.random.default_rng(2).standard_normal((batch, 32, 30, 30)).astype(np.float32)
    module = lk.trace(Block(), x)
    got = lk.to_backend(module, backend, {"forward": {"threads": threads}})(x)
    want = lk.to_backend(module, "reference")(x)
    _close(got, want)
    assert calls and set(calls) <= {"run", "run_team"}


def test_glow_like_s_team_form_keeps_a_weight_given_at_call_time_off_the_strips(monkeypatch):
    """A writable weight (its values may change between calls) would be packed into strips on
    every call: glow_like's team form takes the im2col form for it, and still computes it."""
    from lowerkit.backend.cpu import make_team
    from lowerkit_glow_like.kernels.conv import prepare_conv

    skip_without_team()
    monkeypatch.setattr(panels, "_RULES", ["wide"])
    calls = []
    monkeypatch.setattr(channel_direct.ChannelDirectConv, "run_team", lambda *a: calls.append(a))
    x, w, b, want, _ = _case(0)
    out = np.full(want.shape, np.nan, np.float32)
    attrs = {"stride": (2, 2), "padding": (1, 1, 1, 1), "act": "relu"}
    run = prepare_conv([x, w, b], [out], attrs, None, team=make_team(2))
    run()
    assert not calls
    _close(out, ACTS["relu"](want))
