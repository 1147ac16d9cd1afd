"""A fully-connected layer on its weight packed in bands (lowerkit.backend.cpu.panels.PackedBands):
a few rows (jit.panel.fc_rows) and many (jit.panel.fc, team_fc). ``act(x @ w + bias)``
against float64 numpy over odd shapes and row counts, no write outside the output, eight
threads at once, team regions equal to one thread bit for bit, and both plugins running
their layers on it against reference."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import panels  # noqa: E402
from tests.backend.cpu import test_cpu_panels as gemm  # noqa: E402

_code = gemm._code


def _fenced(rows, n):
    """An output [rows, n] followed by a fence of -7s: (out, whether the fence is intact)."""
    buffer = np.full(rows * n + 64, -7.0, np.float32)
    return buffer[: rows * n].reshape(rows, n), lambda: bool(np.all(buffer[rows * n:] == -7.0))


def _case(rows, k, n, seed=0, bias=True):
    """``x`` [rows, K], ``w`` [K, N], ``bias`` [N]: the panel GEMM's case ``W^T`` [N, K],
    ``X^T`` [K, rows] turned around."""
    wt, xt, b = gemm._case(n, k, rows, seed, bias)
    return np.ascontiguousarray(xt.T), np.ascontiguousarray(wt.T), b


def _expected(x, w, b, act):
    return gemm._expected(np.ascontiguousarray(w.T), np.ascontiguousarray(x.T), b, act).T


# N: whole 16-column bands, a last band of 9-15 columns (masked 16) and of 1-8 (masked 8);
# K: odd, one, long.
SHAPES = [(300, 16), (257, 37), (1, 40), (1000, 9), (64, 1029), (33, 24)]


@pytest.mark.parametrize("rows", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("k,n", SHAPES)
@pytest.mark.parametrize("act", ["none", "clip", "silu", "gelu"])
def test_bands_match_numpy(rows, k, n, act):
    x, w, b = _case(rows, k, n, bias=act != "silu")
    out = np.full((rows, n), np.nan, np.float32)
    panels.PackedBands.of(w, b).run(x, out, _code(act))
    np.testing.assert_allclose(out, _expected(x, w, b, act), rtol=1e-4, atol=1e-4 * max(1.0, k ** 0.5))


def test_writes_only_the_output():
    x, w, b = _case(3, 50, 37)
    buffer = np.full(3 * 37 + 64, -7.0, np.float32)
    out = buffer[: 3 * 37].reshape(3, 37)
    panels.PackedBands.of(w, b).run(x, out, _code("none"))
    np.testing.assert_allclose(out, _expected(x, w, b, "none"), rtol=1e-4, atol=1e-4)
    assert np.all(buffer[3 * 37:] == -7.0)


def test_eight_threads_at_once_get_their_own_results():
    packed = panels.PackedBands.of(*_case(2, 200, 70)[1:])
    cases = [_case(2 + i % 5, 200, 70, seed=i)[0] for i in range(8)]
    outs = [np.empty((c.shape[0], 70), np.float32) for c in cases]
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for _ in range(20):
            packed.run(cases[i], outs[i], _code("relu"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, w, b = _case(2, 200, 70)
    for c, out in zip(cases, outs):
        np.testing.assert_allclose(out, _expected(c, w, b, "relu"), rtol=1e-4, atol=1e-3)


def test_the_rule_takes_two_to_six_rows_of_a_large_weight():
    big = np.zeros((256, 256), np.float32)
    assert panels.bands_fit(2, big) and panels.bands_fit(6, big)
    assert not panels.bands_fit(1, big) and not panels.bands_fit(7, big)
    assert not panels.bands_fit(4, np.zeros((100, 100), np.float32))


def test_shared_packs_a_constant_weight_once_and_never_a_writable_one():
    _, w, b = _case(2, 30, 20)
    w.flags.writeable = False
    b.flags.writeable = False
    first = panels.PackedBands.shared(w, b)
    assert first is not None and panels.PackedBands.shared(w, b) is first
    assert panels.PackedWeight.shared(w, None) is not first  # another packing of the same array
    assert panels.PackedBands.shared(np.ones((4, 4), np.float32), None) is None


def _rows_of_calls(monkeypatch, method: str) -> list[int]:
    """Wrap ``PackedBands.<method>`` so that each call appends the rows it multiplies."""
    original = getattr(panels.PackedBands, method)
    ran: list[int] = []
    monkeypatch.setattr(panels.PackedBands, method,
                        lambda self, x2, *a: (ran.append(x2.shape[0]), original(self, x2, *a))[1])
    return ran


def _on_two_threads(module, backend, x):
    """``module`` lowered to ``backend`` on two threads (nnpack beside reference), and the
    reference's output for ``x``."""
    import lowerkit as lk

    if backend == "nnpack":
        lowered = lk.to_backend(module, ["nnpack", "reference"], {"forward": {"nnpack": {"threads": 2}}})
    else:
        lowered = lk.to_backend(module, backend, {"forward": {"threads": 2}})
    return lowered, np.asarray(lk.to_backend(module, "reference")(x))


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
def test_plugins_run_a_batch_slice_s_classifier_on_the_bands(monkeypatch, backend):
    import lowerkit as lk
    from lowerkit import nn

    net = nn.Sequential(nn.Linear(300, 260), nn.ReLU())
    x = np.random.default_rng(1).standard_normal((8, 300)).astype(np.float32)
    module = lk.trace(net, x)
    ran = _rows_of_calls(monkeypatch, "run")
    lowered = lk.to_backend(module, [backend, "reference"] if backend == "nnpack" else backend)
    got = lowered(x)
    expected = lk.to_backend(module, "reference")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-4)
    assert ran and all(2 <= r <= 6 for r in ran), ran


@pytest.mark.parametrize("rows", [1, 2, 6])
@pytest.mark.parametrize("k,n", SHAPES)
@pytest.mark.parametrize("ways", [1, 2, 3])
@pytest.mark.parametrize("act", ["none", "silu", "gelu"])
def test_a_team_region_equals_the_one_thread_kernel_bit_for_bit(rows, k, n, ways, act):
    """PackedBands.run_team (each thread its share of the bands, the last one the columns past
    the last whole band) gives run's bits, and writes only the output."""
    from lowerkit.backend.cpu.jit.layer import team_ready

    if not team_ready():
        pytest.skip("team kernels cannot run here")
    x, w, b = _case(rows, k, n, bias=act != "silu")
    packed = panels.PackedBands.of(w, b)
    expected = np.empty((rows, n), np.float32)
    packed.run(x, expected, _code(act))
    out, fence_intact = _fenced(rows, n)
    packed.run_team(x, out, _code(act), ways)
    np.testing.assert_array_equal(out, expected)
    assert fence_intact()


def test_the_team_rule_takes_one_row_of_a_large_weight():
    from lowerkit.backend.cpu import team_layers

    assert team_layers.row_on_team(1, team_layers.MIN_LINEAR_WEIGHTS)
    assert not team_layers.row_on_team(2, 10 ** 6) and not team_layers.row_on_team(1, 100)


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
def test_plugins_run_a_one_row_classifier_on_a_team_on_the_bands(monkeypatch, backend):
    """At batch 1 on a team, a fully-connected layer of one row on a constant weight is one
    team region on the packed bands; while the team is off, numpy's gemv."""
    import lowerkit as lk
    from lowerkit import nn
    from lowerkit.backend.cpu import team_off
    from tests.team_calls import team_on_small_layers

    team_on_small_layers(monkeypatch)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(800, 260), nn.ReLU())
    x = np.random.default_rng(1).standard_normal((1, 3, 10, 10)).astype(np.float32)
    module = lk.trace(net, x)
    ran = _rows_of_calls(monkeypatch, "run_team")
    lowered, expected = _on_two_threads(module, backend, x)
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert ran and set(ran) == {1}
    ran.clear()
    with team_off():
        np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert not ran


# Many rows (PackedBands.run_rows / run_rows_team, jit.panel.fc / team_fc): row panels of six
# against bands of jit.panel.FC_WIDTH columns (64 with 16-float vectors, else 16). Rows: one
# panel, a partial last panel, several; with a chunk of the bands smaller than N (K = 1029) and
# one chunk for all. N beyond SHAPES: whole 64-column bands only, and a last band of 9-63
# columns that goes 16 at a time and masked.
ROW_COUNTS = [7, 13, 48, 197]
WIDE_SHAPES = [(96, 128), (70, 150), (200, 64 + 57)]


@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("k,n", SHAPES + WIDE_SHAPES)
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
def test_many_rows_match_numpy(rows, k, n, act):
    x, w, b = _case(rows, k, n, bias=act != "relu")
    out, fence_intact = _fenced(rows, n)
    panels.PackedBands.of(w, b, many_rows=True).run_rows(x, out, _code(act))
    np.testing.assert_allclose(out, _expected(x, w, b, act), rtol=1e-4, atol=1e-4 * max(1.0, k ** 0.5))
    assert fence_intact()


@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("k,n", [(300, 16), (257, 37), (64, 1029), (33, 24), (70, 150)])
@pytest.mark.parametrize("ways", [2, 3])
@pytest.mark.parametrize("by_columns", [False, True])
def test_many_rows_on_a_team_equal_one_thread_bit_for_bit(monkeypatch, rows, k, n, ways, by_columns):
    """run_rows_team, in shares of the rows or of the bands, gives run_rows' bits and writes
    only the output."""
    from lowerkit.backend.cpu.jit.layer import team_ready

    if not team_ready():
        pytest.skip("team kernels cannot run here")
    x, w, b = _case(rows, k, n)
    packed = panels.PackedBands.of(w, b, many_rows=True)
    monkeypatch.setattr(panels.PackedBands, "by_columns", lambda self, r: by_columns)
    expected = np.empty((rows, n), np.float32)
    packed.run_rows(x, expected, _code("gelu"))
    out, fence_intact = _fenced(rows, n)
    packed.run_rows_team(x, out, _code("gelu"), ways)
    np.testing.assert_array_equal(out, expected)
    assert fence_intact()


@pytest.mark.parametrize("rows", [7, 13, 197])
@pytest.mark.parametrize("k,n", [(96, 128), (70, 150), (200, 64 + 57), (33, 24)])
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
def test_many_rows_add_a_residual_before_the_activation(rows, k, n, act):
    """A fused residual add (glow_like's ``glow.fc(x, w, bias, residual)``): each tile adds its
    part of the residual, then the activation — the bits of the product, then the sum, then
    the activation, on one thread and on a team."""
    from lowerkit.backend.cpu.jit import activation_code, load

    x, w, b = _case(rows, k, n)
    residual = np.random.default_rng(rows + n).standard_normal((rows, n)).astype(np.float32)
    packed = panels.PackedBands.of(w, b, many_rows=True)
    expected = np.empty((rows, n), np.float32)
    packed.run_rows(x, expected, _code("none"))
    np.add(expected, residual, out=expected)
    if act != "none":
        load("conv").activate(expected.reshape(-1), *activation_code({"act": act}))
    out, fence_intact = _fenced(rows, n)
    packed.run_rows(x, out, _code(act), residual)
    np.testing.assert_array_equal(out, expected)
    assert fence_intact()
    from lowerkit.backend.cpu.jit.layer import team_ready

    if team_ready():
        for by_columns in (False, True):
            teamed = np.empty((rows, n), np.float32)
            packed.kernels.team_fc(x, packed.bands, packed.bias, teamed, *_code(act), 2, by_columns, residual)
            np.testing.assert_array_equal(teamed, expected)


def test_each_kernel_family_takes_only_its_own_packing():
    from lowerkit.backend.cpu import jit

    x, w, b = _case(7, 40, 150)
    out = np.empty((7, 150), np.float32)
    few, many = panels.PackedBands.of(w, b), panels.PackedBands.of(w, b, many_rows=True)
    assert few.width == 16 and many.width == jit.load("panel").FC_WIDTH
    assert panels.PackedBands.shared(w, b) is None  # writable: never shared
    if many.width != few.width:
        with pytest.raises(ValueError, match="many_rows=True"):
            few.run_rows(x, out, _code("none"))
        with pytest.raises(ValueError, match="16 columns"):
            many.run(x[:2], out[:2], _code("none"))


def test_shared_keeps_the_two_packings_of_one_weight_apart():
    x, w, b = _case(7, 40, 150)
    w.flags.writeable = False
    b.flags.writeable = False
    few, many = panels.PackedBands.shared(w, b), panels.PackedBands.shared(w, b, many_rows=True)
    assert few is panels.PackedBands.shared(w, b) and many is panels.PackedBands.shared(w, b, many_rows=True)
    out = np.empty((7, 150), np.float32)
    many.run_rows(x, out, _code("none"))
    np.testing.assert_allclose(out, _expected(x, w, b, "none"), rtol=1e-4, atol=1e-3)


def test_a_team_splits_the_bands_only_for_a_large_weight_over_few_rows():
    packed = panels.PackedBands.of(np.zeros((768, 3072), np.float32), None)
    assert packed.by_columns(49) and not packed.by_columns(3136)
    assert not panels.rows_fit(6) and panels.rows_fit(7)


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
def test_plugins_run_many_rows_on_a_team_on_the_bands(monkeypatch, backend):
    """On a team, a fully-connected layer of more than six rows on a constant weight (a
    channels-last map's pixels — ConvNeXt's pointwise layers —, a sequence's tokens) is one
    team region of row panels against the packed bands."""
    import lowerkit as lk
    from lowerkit import nn, ops
    from tests.team_calls import team_on_small_layers

    class ChannelsLast(nn.Module):  # glow_like's team mode needs a convolution
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 40, 3, padding=1)
            self.fc = nn.Linear(40, 70)

        def forward(self, x):
            return ops.relu(self.fc(ops.permute(self.conv(x), (0, 2, 3, 1))))

    team_on_small_layers(monkeypatch)
    rng = np.random.default_rng(1)
    if backend == "nnpack":  # 81 tokens: nnpack runs no permute, and its team plans one image
        x = rng.standard_normal((1, 81, 40)).astype(np.float32)
        module = lk.trace(nn.Sequential(nn.Linear(40, 70), nn.ReLU()), x)
    else:
        x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
        module = lk.trace(ChannelsLast(), x)
    ran = _rows_of_calls(monkeypatch, "run_rows_team")
    lowered, expected = _on_two_threads(module, backend, x)
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert ran and set(ran) == {81}
