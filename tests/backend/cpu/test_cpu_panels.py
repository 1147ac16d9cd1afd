"""The panel GEMM (lowerkit.backend.cpu.panels, kernels in jit.panel): ``act(w @ x + bias)``
against float64 numpy over odd shapes (every tile kind, partial panels, inner dimensions
past one block), the team region equal to the serial kernel bit for bit in both band
directions, no write outside the output, eight threads at once, and both plugins running
their 1x1 layers on it against reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import jit, panels  # noqa: E402
from lowerkit.backend.cpu.jit import vectors  # noqa: E402
from lowerkit.backend.cpu.jit.layer import team_ready  # noqa: E402
from tests.team_calls import from_threads  # noqa: E402

ACTS = {
    "none": lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "clip": lambda v: np.clip(v, 0.0, 6.0),
    "silu": lambda v: v / (1 + np.exp(-v)),
    "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
    "hardsigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1),
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))),  # no IR form: act_span
}


STRIP = jit.load("panel").STRIP_FLOATS
NO_RESIDUAL = np.empty((0, 0), np.float32)


def _code(name):
    return jit.activation_code({"act": name, "act_min": 0.0, "act_max": 6.0})


def _case(m, k, n, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    return w, x, b


def _expected(w, x, b, act):
    v = w.astype(np.float64) @ x.astype(np.float64)
    if b is not None:
        v += b[:, None]
    return ACTS[act](v)


# M: partial panels (1, 5, 7, 13), whole ones (6, 12); N: whole 16-column tiles and every kind
# of partial one (one column after whole tiles, taken by the last tile: 17, 49, 113; 1-3 single
# columns, 4-8 and 9-15 masked: 1, 7, 8, 9, 16, 25, 135, 74, 50); where the kernel has the wide
# 6 x 32 tile (jit.panel.TILE) also 32-column tiles followed by a 16-column one (50) or by the
# last tile with its extra column (49, 113). K: 1, odd, a multiple of 16, past the 256-deep
# block. The last four have enough panels (jit.panel.PACK_PANELS) and rows for the narrow
# tile's image to be copied into strips first.
SHAPES = [(1, 1, 1), (5, 3, 7), (6, 16, 16), (7, 17, 25), (12, 33, 8), (13, 300, 49), (16, 32, 135),
          (5, 40, 17), (24, 520, 9), (2, 257, 41), (13, 300, 50), (7, 70, 113), (197, 300, 37), (200, 64, 74),
          (193, 70, 3), (200, 300, 49),
          (30, 300, 130), (7, 129, 64),  # the 64-column tile over inner blocks (jit.panel._k_block)
          (7, 300, 16), (13, 1100, 3)]  # at most 16 columns: inner blocks of up to NARROW_K_BLOCK


@pytest.mark.parametrize("act", ["relu", "clip", "silu", "hardswish", "hardsigmoid", "sigmoid"])  # _act_ir.IR_CODES
def test_the_tiles_activation_equals_the_compiled_activation_pass_bit_for_bit(act):
    """The micro-kernels activate their accumulators in LLVM IR (jit._act_ir); the same sums
    through the numba activation pass (jit.conv.activate) come out identical, tile columns
    and the one-column kernel's alike (N = 16 * 9 + 2 + 16 * 8 + 9)."""
    w, x, b = _case(13, 40, 16 * 9 + 2 + 16 * 8 + 9, seed=4)
    x *= 3  # values over the activations' interesting ranges
    packed = panels.PackedWeight.of(w, b)
    fused, plain = np.empty((13, x.shape[1]), np.float32), np.empty((13, x.shape[1]), np.float32)
    packed.run(x, fused, _code(act))
    packed.run(x, plain, _code("none"))
    jit.load("conv").activate(plain.reshape(-1), *_code(act))
    np.testing.assert_array_equal(fused, plain)


def test_a_batch_in_one_call_equals_the_images_one_by_one():
    w, _, b = _case(13, 40, 1, seed=5)
    x = np.random.default_rng(6).standard_normal((3, 40, 57)).astype(np.float32)
    packed = panels.PackedWeight.of(w, b)
    whole, single = np.empty((3, 13, 57), np.float32), np.empty((3, 13, 57), np.float32)
    packed.run_images(x, whole, _code("silu"))
    for i in range(3):
        packed.run(x[i], single[i], _code("silu"))
    np.testing.assert_array_equal(whole, single)


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("act", list(ACTS))
def test_panel_gemm_matches_numpy(m, k, n, act):
    w, x, b = _case(m, k, n, bias=act != "relu")
    packed = panels.PackedWeight.of(w, b)
    out = np.full((m, n), np.nan, np.float32)
    packed.run(x, out, _code(act))
    np.testing.assert_allclose(out, _expected(w, x, b, act), rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])  # none, in the tiles, after them (act_span)
def test_a_residual_is_added_once_before_the_activation(m, k, n, act):
    """The fused residual add: every kind of tile and the one-column kernel add it, on the last
    block of K only (K past 256 has several), before the activation."""
    w, x, b = _case(m, k, n)
    residual = np.random.default_rng(9).standard_normal((m, n)).astype(np.float32)
    packed = panels.PackedWeight.of(w, b)
    out = np.full((m, n), np.nan, np.float32)
    packed.run(x, out, _code(act), residual)
    expected = ACTS[act](w.astype(np.float64) @ x.astype(np.float64) + b[:, None] + residual)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_residuals_of_images_of_a_team_and_of_row_tiles():
    rng = np.random.default_rng(10)
    w, _, b = _case(13, 40, 1, seed=5)
    packed = panels.PackedWeight.of(w, b)
    x = rng.standard_normal((3, 40, 57)).astype(np.float32)
    residual = rng.standard_normal((3, 13, 57)).astype(np.float32)
    whole, single = np.empty((3, 13, 57), np.float32), np.empty((3, 13, 57), np.float32)
    packed.run_images(x, whole, _code("relu"), residual)
    for i in range(3):
        packed.run(x[i], single[i], _code("relu"), residual[i])
    np.testing.assert_array_equal(whole, single)
    np.testing.assert_allclose(single[0], np.maximum(w @ x[0] + b[:, None] + residual[0], 0), rtol=1e-4, atol=1e-4)
    if team_ready():
        team = np.full((13, 57), np.nan, np.float32)
        packed.run_team(x[1], team, _code("relu"), 2, residual[1])
        np.testing.assert_array_equal(team, single[1])
    image = rng.standard_normal((4, 11, 13)).astype(np.float32)  # a 3x3/2 convolution in row tiles
    weight = rng.standard_normal((7, 4, 3, 3)).astype(np.float32)
    packed = panels.PackedWeight.of(weight, None)
    added = rng.standard_normal((7, 6, 7)).astype(np.float32)
    tiled = np.full((7, 6, 7), np.nan, np.float32)
    packed.run_tiles(image, tiled, _code("relu"), (3, 3, 2, 2, 1, 1, 1, 1), 2, np.empty(36 * 2 * 7, np.float32),
                     added)
    plain = np.full((7, 6, 7), np.nan, np.float32)
    packed.run_tiles(image, plain, _code("none"), (3, 3, 2, 2, 1, 1, 1, 1), 2, np.empty(36 * 2 * 7, np.float32))
    np.testing.assert_allclose(tiled, np.maximum(plain + added, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(5, 3, 7), (13, 300, 49), (16, 32, 135), (40, 24, 20), (7, 64, 300),
                                   (400, 100, 70)])  # the last copies the image into strips (>= 32 panels)
@pytest.mark.parametrize("ways", [1, 2, 3])
def test_team_region_equals_the_serial_kernel(m, k, n, ways):
    if not team_ready():
        pytest.skip("team kernels cannot run here")
    w, x, b = _case(m, k, n)
    packed = panels.PackedWeight.of(w, b)
    serial = np.empty((m, n), np.float32)
    packed.run(x, serial, _code("silu"))
    team = np.full((m, n), np.nan, np.float32)
    packed.run_team(x, team, _code("silu"), ways)  # columns if n >= m, else panels
    np.testing.assert_array_equal(team, serial)
    other = np.full((m, n), np.nan, np.float32)
    packed.kernels.team_gemm(packed.panels, packed.bias, x, other, panels.strips(3 * STRIP), k, m, packed.columns,
                             *_code("silu"), ways,
                             not n >= m, NO_RESIDUAL)  # the other band direction
    np.testing.assert_array_equal(other, serial)


@pytest.mark.parametrize("m,k,n", [(5, 3, 7), (13, 300, 49), (16, 32, 135), (40, 24, 20), (400, 100, 70)])
@pytest.mark.parametrize("ways", [1, 2, 3])
def test_a_gated_team_region_equals_the_weight_scaled_first_bit_for_bit(m, k, n, ways):
    """run_team_gated (each thread scales its own copy of the packed weight by the gate) gives
    run_team of the weight scaled before packing, in both band directions, with a residual;
    calls with another gate leave nothing of the last one behind."""
    if not team_ready():
        pytest.skip("team kernels cannot run here")
    w, x, b = _case(m, k, n)
    rng = np.random.default_rng(5)
    packed = panels.PackedWeight.of(w, b)
    copies = packed.gated_copies(ways)
    added = rng.standard_normal((m, n)).astype(np.float32)
    for gate in (rng.random(k).astype(np.float32), rng.standard_normal(k).astype(np.float32)):
        expected = np.empty((m, n), np.float32)
        panels.PackedWeight.of(w * gate, b).run_team(x, expected, _code("silu"), ways, added)
        got = np.full((m, n), np.nan, np.float32)
        packed.run_team_gated(gate, copies, x, got, _code("silu"), ways, added)
        np.testing.assert_array_equal(got, expected)
        other = np.full((m, n), np.nan, np.float32)
        packed.kernels.team_gated_gemm(packed.panels, gate, copies, packed.bias, x, other, panels.strips(3 * STRIP), k,
                                       m, packed.columns, *_code("silu"), ways, not packed.by_columns(n, gated=True),
                                       added)  # the other band direction
        np.testing.assert_array_equal(other, expected)


@pytest.mark.parametrize("m,k,n", [(5, 3, 7), (13, 300, 49), (16, 32, 135), (40, 24, 20), (400, 100, 70)])
def test_gated_images_equal_each_image_with_the_weight_scaled_first_bit_for_bit(m, k, n):
    """bind_gated_images (per image, the packed weight scaled by that image's gate into one
    copy, in one compiled call) gives, image by image, the weight scaled before packing; a
    second call with other gates leaves nothing of the first behind."""
    w, _, b = _case(m, k, n)
    rng = np.random.default_rng(6)
    images = 3
    x = rng.standard_normal((images, k, n)).astype(np.float32)
    packed = panels.PackedWeight.of(w, b)
    gates = np.empty((images, k), np.float32)
    out = np.full((images, m, n), np.nan, np.float32)
    call = packed.bind_gated_images(gates, x, out, _code("silu"))
    for values in (rng.random((images, k)), rng.standard_normal((images, k))):
        gates[...] = values
        call()
        for i in range(images):
            expected = np.empty((m, n), np.float32)
            panels.PackedWeight.of(w * gates[i], b).run(x[i], expected, _code("silu"))
            np.testing.assert_array_equal(out[i], expected)


@pytest.mark.parametrize("n", [3, 37, 74, 130])
def test_copying_the_image_into_strips_changes_no_bit(n):
    # One call over every panel copies the image (>= PACK_PANELS panels, the narrow tile; the
    # wide one reads in place everywhere); two calls over fewer panels each read it in place.
    # Same products in the same order: equal bit for bit.
    m, k = 200, 300
    w, x, b = _case(m, k, n)
    packed = panels.PackedWeight.of(w, b)
    assert packed.count >= packed.kernels.PACK_PANELS and k >= packed.kernels.PACK_INPUTS
    whole = np.full((m, n), np.nan, np.float32)
    packed.run(x, whole, _code("clip"))
    halves = np.full((m, n), np.nan, np.float32)
    half = packed.count // 2
    assert half < packed.kernels.PACK_PANELS
    for pa, pb in ((0, half), (half, packed.count)):
        packed.kernels.gemm(packed.panels, packed.bias, x, halves, panels.strips(STRIP), k, m, packed.columns,
                            *_code("clip"), pa, pb, 0, n, NO_RESIDUAL)
    np.testing.assert_array_equal(whole, halves)


def test_an_image_whose_rows_alias_in_the_cache_is_copied_into_strips_with_the_same_bits():
    # Rows 4 KB apart (1024 columns) share cache sets: with the narrow tile a call over at least
    # ALIASING_PANELS panels copies such an image into strips however few panels it has; the
    # products are the same, in the same order, as read in place.
    m, k, n = 48, 70, 1024
    w, x, b = _case(m, k, n)
    packed = panels.PackedWeight.of(w, b)
    kernels = packed.kernels
    assert kernels.ALIASING_PANELS <= packed.count < kernels.PACK_PANELS
    assert packed._copies(n) == kernels.PACKS and not packed._copies(n + 16)
    few = kernels.ROWS * (kernels.ALIASING_PANELS - 1)
    assert not panels.PackedWeight.of(w[:few], b[:few])._copies(n)
    in_place = np.full((m, n), np.nan, np.float32)
    kernels.gemm(packed.panels, packed.bias, x, in_place, np.empty(0, np.float32), k, m, packed.columns,
                 *_code("clip"), 0, packed.count, 0, n, NO_RESIDUAL)
    np.testing.assert_allclose(in_place, _expected(w, x, b, "clip"), rtol=1e-4, atol=1e-4)
    copied = np.full((m, n), np.nan, np.float32)
    packed.run(x, copied, _code("clip"))
    np.testing.assert_array_equal(copied, in_place)
    for ways in (2, 3):
        team = np.full((m, n), np.nan, np.float32)
        packed.run_team(x, team, _code("clip"), ways)
        np.testing.assert_array_equal(team, in_place)


@pytest.mark.parametrize("m,k,n", [(13, 20, 37), (200, 70, 37), (13, 20, 49), (200, 70, 49)])  # in place / copied
def test_writes_only_the_output_and_only_the_panels_and_columns_asked_for(m, k, n):
    w, x, b = _case(m, k, n)
    buffer = np.full(m * n + 64, -7.0, np.float32)
    out = buffer[: m * n].reshape(m, n)
    packed = panels.PackedWeight.of(w, b)
    packed.kernels.gemm(packed.panels, packed.bias, x, out, panels.strips(STRIP), k, m, packed.columns, 0, 0.0, 0.0,
                        0, packed.count, 0, n, NO_RESIDUAL)
    np.testing.assert_allclose(out, _expected(w, x, b, "none"), rtol=1e-4, atol=1e-4)
    assert np.all(buffer[m * n :] == -7.0)
    part = np.full((m, n), -1.0, np.float32)  # panels [1, 2) x columns [8, 24) only
    packed.kernels.gemm(packed.panels, packed.bias, x, part, panels.strips(STRIP), k, m, packed.columns, 0, 0.0, 0.0,
                        1, 2, 8, 24, NO_RESIDUAL)
    expected = np.full((m, n), -1.0)
    expected[6:12, 8:24] = _expected(w, x, b, "none")[6:12, 8:24]
    np.testing.assert_allclose(part, expected, rtol=1e-4, atol=1e-4)


def test_eight_threads_at_once_get_their_own_results():
    w, _, b = _case(30, 48, 1)
    packed = panels.PackedWeight.of(w, b)
    inputs = [_case(30, 48, 70, seed=s)[1] for s in range(8)]

    def call(i):
        outs = []
        for _ in range(20):
            out = np.empty((30, 70), np.float32)
            packed.run(inputs[i], out, _code("relu"))
            outs.append(out)
        return outs

    results = from_threads(call)
    for i in range(8):
        expected = _expected(w, inputs[i], b, "relu")
        for got in results[i]:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


class _RecordingKernels:
    """The panel kernels as a stand-in that copies (``PACKS``) and records, for each call, whether
    the strips it got are the calling thread's own."""

    PACKS, PACK_PANELS, PACK_INPUTS, STRIP_FLOATS, ALIASING_BYTES, ALIASING_PANELS = True, 1, 1, 64, 4096, 4

    def __init__(self):
        self.own = []

    def _record(self, strips, ways):
        self.own.append(strips is panels.strips(ways * self.STRIP_FLOATS))

    def gemm(self, *args):
        self._record(args[4], 1)

    gemm_images = gemm

    def team_gemm(self, *args):
        self._record(args[4], args[11])

    def team_gated_gemm(self, *args):
        self._record(args[6], args[13])

    def gated_gemm_images(self, *args):
        self._record(args[6], 1)


@pytest.mark.parametrize("method", ["bind", "bind_images", "bind_team", "bind_team_gated", "bind_gated_images"])
def test_a_call_bound_on_one_thread_copies_into_the_strips_of_the_thread_that_runs_it(method):
    """The plugins bind a layer's calls on the thread that builds the plan and run them on the
    pool's workers (a batch slice each): two workers copying their images into the binding
    thread's strips would overwrite each other's (every AVX2 CPU's path: the narrow tile
    copies). A bound call looks the strips up where it runs."""
    import dataclasses
    import threading

    m, k, n = 30, 48, 20
    w, x, b = _case(m, k, n)
    kernels = _RecordingKernels()
    packed = dataclasses.replace(panels.PackedWeight.of(w, b), kernels=kernels)
    out, act = np.empty((m, n), np.float32), _code("relu")
    if method == "bind":
        call = packed.bind(x, out, act)
    elif method == "bind_images":
        call = packed.bind_images(x[None], out[None], act)
    elif method == "bind_team":
        call = packed.bind_team(x, out, act, 2)
    elif method == "bind_gated_images":
        call = packed.bind_gated_images(np.ones((2, k), np.float32), np.stack([x, x]), np.stack([out, out]), act)
    else:
        call = packed.bind_team_gated(np.ones((2, k), np.float32), packed.gated_copies(2), np.stack([x, x]),
                                      np.stack([out, out]), act, 2)
    panels.strips(2 * kernels.STRIP_FLOATS)  # the binding thread has strips of its own
    worker = threading.Thread(target=call)
    worker.start()
    worker.join()
    assert kernels.own and all(kernels.own)


def test_the_rule_takes_few_input_channels_or_small_maps_on_one_thread_and_more_on_a_team():
    assert panels.fits(16, 12544, team=False) and panels.fits(128, 3136, team=False)
    assert not panels.fits(147, 12544, team=False) and not panels.fits(480, 3136, team=False)
    assert panels.fits(480, 784, team=False) and panels.fits(4608, 49, team=False)
    assert panels.fits(480, 196, team=True) and panels.fits(960, 49, team=True)
    assert not panels.fits(576, 196, team=True) and panels.fits(4608, 49, team=True)
    assert panels.block_columns(16) == 128 and panels.block_columns(144) == 64


def test_with_wide_vectors_the_rule_keeps_only_one_thread_s_thinnest_layers(monkeypatch):
    """Where the CPU has AVX-512, BLAS's sgemm takes the team regions, the stems and every
    layer but 1x1 ones of at most 16 input channels on one thread; a team runs a stem of
    few rows of columns untiled (one im2col, sgemm bands)."""
    from lowerkit.backend.cpu.team_layers import DenseTeamForm

    monkeypatch.setattr(panels, "_RULES", ["avx512"])
    assert panels.fits(16, 12544, team=False) and not panels.fits(24, 3136, team=False)
    assert not panels.fits(16, 12544, team=True) and not panels.fits(960, 49, team=True)
    assert panels.tile_rows(147, (112, 112)) == 0
    stem = DenseTeamForm.of(64, 3 * 49, (7, 7), (2, 2), (3,) * 4, (1, 1), (112, 112), 2)  # ResNet's: in tiles
    assert not stem.panel and stem.tiled and stem.pack(np.zeros((64, 147), np.float32), np.zeros(64, np.float32)) is None
    stem = DenseTeamForm.of(32, 3 * 9, (3, 3), (2, 2), (1,) * 4, (1, 1), (112, 112), 2)  # MobileNetV2's: 27 rows
    assert not stem.panel and not stem.tiled and stem.cols_shape == (1, 27 * 112 * 112)


@pytest.mark.parametrize("chosen", panels.RULE_SETS)
def test_the_environment_names_the_rules_at_every_call(monkeypatch, chosen):
    monkeypatch.setattr(panels, "_RULES", ["avx2"])
    monkeypatch.setenv(panels.RULES_ENV, chosen)
    assert panels.rules() == chosen and panels._RULES == ["avx2"]
    assert panels.wide_vectors() is (chosen == "avx512") and panels.wide_tile() is (chosen == "wide")


def test_otherwise_the_kernels_and_the_cpu_choose_the_rules_once(monkeypatch):
    monkeypatch.setattr(panels, "_RULES", [])
    monkeypatch.delenv(panels.RULES_ENV, raising=False)
    kernels = jit.load("panel")
    expected = "wide" if kernels.TILE == 32 else "avx512" if vectors.host_full_width() else "avx2"
    assert panels.rules() == expected and panels._RULES == [expected]  # asked once
    assert panels.rules() == expected


def test_without_numba_the_rules_follow_the_cpu_alone(monkeypatch):
    def no_numba(name, package=None):
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(panels, "_RULES", [])
    monkeypatch.delenv(panels.RULES_ENV, raising=False)
    monkeypatch.setattr(jit, "load", no_numba)
    assert panels.rules() == ("avx512" if vectors.host_full_width() else "avx2")


@pytest.mark.parametrize("features, name, wide", [
    ({"avx512f": True, "avx2": True}, "sapphirerapids", True),
    ({"avx512f": True, "avx2": True}, "znver4", False),  # 512-bit operations in two halves
    ({"avx512f": False, "avx2": True}, "znver3", False),
    ({"avx2": True}, "haswell", False),
])
def test_only_full_width_avx512_counts_as_wide_vectors(features, name, wide):
    assert vectors.full_width_avx512(features, name) is wide


def test_the_wide_tile_has_16_float_vectors_where_the_cpu_runs_them_at_full_width():
    kernels = jit.load("panel")
    full = kernels.TILE == 32 and kernels._compiled_for_host() and vectors.host_full_width()
    assert kernels.LANES == (16 if full else 8)


def test_with_the_wide_tile_the_panel_gemm_takes_every_layer(monkeypatch):
    monkeypatch.setattr(panels, "_RULES", ["wide"])
    assert panels.fits(147, 12544, team=False) and panels.fits(480, 3136, team=False)
    assert panels.fits(576, 196, team=True) and panels.fits(4608, 3136, team=True)
    monkeypatch.setattr(panels, "_RULES", ["avx512"])  # full-width AVX-512 with the narrow tile
    assert not panels.fits(147, 12544, team=False) and not panels.fits(960, 49, team=True)


_NARROW_TILE_SCRIPT = """
import numpy as np
from lowerkit.backend.cpu import jit, panels
kernels = jit.load("panel")
assert kernels.TILE == 16 and kernels.PACKS, (kernels.TILE, kernels.PACKS)
rng = np.random.default_rng(0)
for m, k, n in ((200, 300, 49), (200, 64, 74), (197, 300, 37), (13, 300, 50), (7, 17, 25), (193, 70, 3)):
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    packed = panels.PackedWeight.of(w, b)
    out = np.full((m, n), np.nan, np.float32)
    packed.run(x, out, (1, 0.0, 0.0))
    expected = np.maximum(w.astype(np.float64) @ x.astype(np.float64) + b[:, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    team = np.full((m, n), np.nan, np.float32)
    packed.run_team(x, team, (1, 0.0, 0.0), 2)
    np.testing.assert_array_equal(team, out)
# Calls bound here and run on two threads at once (batch slices on the workers), each copying
# its own image into strips.
import threading
m, k, n = 200, 300, 143
w = rng.standard_normal((m, k)).astype(np.float32)
packed = panels.PackedWeight.of(w, None)
xs = [rng.standard_normal((2, k, n)).astype(np.float32) for _ in range(2)]
outs = [np.empty((2, m, n), np.float32) for _ in range(2)]
calls = [packed.bind_images(xs[i], outs[i], (0, 0.0, 0.0)) for i in range(2)]
expected = [np.einsum("mk,ikn->imn", w.astype(np.float64), x.astype(np.float64)) for x in xs]
errors = []
def repeat(i):
    for _ in range(40):
        calls[i]()
        errors.append(np.abs(outs[i] - expected[i]).max())
threads = [threading.Thread(target=repeat, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert len(errors) == 80 and max(errors) < 1e-3, max(errors)
# The direct-by-output-channels kernel's 6 x 16 tile (strips of 16 channels): a 3x3/2 layer
# with 70 output channels (a partial last strip), a residual and ReLU, against float64.
from lowerkit.backend.cpu import channel_direct
assert jit.load("channel_direct").STRIP == 16
c, oc, h, wd = 40, 70, 11, 13
x = rng.standard_normal((2, c, h, wd)).astype(np.float32)
w = (rng.standard_normal((oc, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
b = rng.standard_normal(oc).astype(np.float32)
xp = np.zeros((2, c, h + 2, wd + 2))
xp[:, :, 1:-1, 1:-1] = x
oh, ow = (h - 1) // 2 + 1, (wd - 1) // 2 + 1
want = np.zeros((2, oc, oh, ow)) + b[None, :, None, None]
for i in range(3):
    for j in range(3):
        want += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 2 * oh - 1:2, j:j + 2 * ow - 1:2], w[:, :, i, j].astype(np.float64))
residual = rng.standard_normal(want.shape).astype(np.float32)
form = channel_direct.ChannelDirectConv.of((c, h, wd), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (oh, ow))
got = np.full(want.shape, np.nan, np.float32)
form.run(channel_direct.StripWeight.of(w, b), x, got, (1, 0.0, 0.0), np.empty(form.padded_shape, np.float32), residual)
np.testing.assert_allclose(got, np.maximum(want + residual, 0), rtol=1e-4, atol=1e-4)
print("narrow tile ok")
"""


def test_the_narrow_tile_and_its_strips_where_numba_compiles_for_another_cpu():
    """Compiled for an AVX2 CPU (``NUMBA_CPU_NAME=haswell``), the kernel keeps the 6 x 16 tile
    and copies the image into strips on calls over many panels, and the direct-by-output-
    channels kernel has its 6 x 16 tile: the paths of every AVX2 machine, checked here in a
    process of its own wherever this CPU can run AVX2 code (the first run compiles those
    kernels for that CPU: a minute or two, then cached)."""
    import os
    import subprocess
    import sys

    from llvmlite import binding

    features = binding.get_host_cpu_features()
    if not (features.get("avx2") and features.get("fma")):
        pytest.skip("this CPU cannot run code compiled for haswell (AVX2 and FMA)")
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell"}
    result = subprocess.run([sys.executable, "-c", _NARROW_TILE_SCRIPT], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "narrow tile ok" in result.stdout


_OTHER_LANES_SCRIPT = """
import sys
import numpy as np
from lowerkit.backend.cpu import jit, panels
kernels = jit.load("panel")
assert (kernels.TILE, kernels.LANES) == (32, int(sys.argv[1])), (kernels.TILE, kernels.LANES)
rng = np.random.default_rng(0)
acts = {"relu": (1, 0.0, 0.0), "clip": (2, 0.0, 6.0), "silu": (5, 0.0, 0.0), "sigmoid": (8, 0.0, 0.0)}
expect = {"relu": lambda y: np.maximum(y, 0), "clip": lambda y: np.clip(y, 0, 6),
          "silu": lambda y: y / (1 + np.exp(-y)), "sigmoid": lambda y: 1 / (1 + np.exp(-y))}
for m, k, n in ((200, 300, 64), (13, 300, 97), (7, 17, 33), (96, 16, 200), (64, 600, 49)):
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(np.float32)
    packed = panels.PackedWeight.of(w, b)
    for name, act in acts.items():
        out = np.full((m, n), np.nan, np.float32)
        packed.run(x, out, act, r)
        y = w.astype(np.float64) @ x.astype(np.float64) + b[:, None] + r
        np.testing.assert_allclose(out, expect[name](y), rtol=1e-4, atol=1e-4 * np.sqrt(k))
        team = np.full((m, n), np.nan, np.float32)
        packed.run_team(x, team, act, 2, r)
        np.testing.assert_array_equal(team, out)
print("lanes ok")
"""


def test_the_wide_tile_in_its_other_vector_width():
    """The 6 x 32 tile in the vector width this CPU does not choose (``$LOWERKIT_PANEL_LANES``:
    8 floats where it runs 512-bit vectors at full width, else 16) against float64, with
    each activation of an IR form and a residual, in a process of its own (the first run
    compiles the panel kernels for that width: about a minute, then cached)."""
    import os
    import subprocess
    import sys

    kernels = jit.load("panel")
    if kernels.TILE != 32:
        pytest.skip("the 6 x 32 tile needs AVX-512VL (and numba compiling for this CPU)")
    other = 24 - kernels.LANES
    env = {**os.environ, kernels.LANES_ENV: str(other)}
    result = subprocess.run([sys.executable, "-c", _OTHER_LANES_SCRIPT, str(other)], capture_output=True,
                            text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lanes ok" in result.stdout


@pytest.mark.parametrize("backend", ["glow_like", ["nnpack", "glow_like"]], ids=["glow_like", "mixed"])
def test_the_models_match_reference_under_every_rule(monkeypatch, backend):
    import lowerkit as lk
    from lowerkit import models

    x = models.example_input("mobilenet_v2", batch=1, small=True)
    module = lk.trace(models.get("mobilenet_v2", small=True), x)
    expected = np.asarray(lk.to_backend(module, "reference")(x))
    for chosen in panels.RULE_SETS:
        monkeypatch.setattr(panels, "_RULES", [chosen])
        got = np.asarray(lk.to_backend(module, backend)(x))
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_a_team_runs_the_stems_untiled_on_the_panel_gemm_and_large_maps_of_many_inputs_in_tiles():
    from lowerkit.backend.cpu.team_layers import DenseTeamForm

    def form(oc, c, k, stride, pad, out_hw):
        return DenseTeamForm.of(oc, c * k * k, (k, k), (stride, stride), (pad,) * 4, (1, 1), out_hw, 2)

    for stem in (form(32, 3, 3, 2, 1, (112, 112)), form(64, 3, 7, 2, 3, (112, 112))):  # MobileNetV2's, ResNet's
        assert stem.panel and not stem.tiled and stem.cols_shape == (1, stem.cols_shape[1])
    layer = form(64, 64, 3, 1, 1, (56, 56))  # 576 rows of columns: sgemm, in tiles
    assert layer.tiled and not layer.panel and layer.cols_shape[0] == 2


def test_the_tile_rule_takes_few_rows_of_columns_over_maps_too_large_for_the_cache():
    assert panels.tile_rows(147, (112, 112)) == panels.TILE_BYTES // (4 * 147 * 112) == 3
    assert panels.tile_rows(27, (112, 112)) == 21 and panels.tile_rows(27, (75, 75)) == 32
    assert panels.tile_rows(27, (40, 40)) == 0  # 173 KB of columns: untiled
    assert panels.tile_rows(288, (112, 112)) == 0  # many rows of columns: too few pixels per tile
    assert panels.tile_rows(4096 // 4, (600, 1)) == 0


def _direct_conv(x, w, b, stride, pad):
    """float64 direct convolution of one image ``x`` [C, H, W] (padding top, left, bottom, right)."""
    c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.zeros((c, h + pad[0] + pad[2], wd + pad[1] + pad[3]))
    xp[:, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    out = np.zeros((oc, oh, ow)) + b[:, None, None]
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("oc,chw->ohw", w[:, :, i, j].astype(np.float64), patch)
    return out


# one image: C, OC, H, W, kernel, stride, padding (top, left, bottom, right), rows per tile
TILE_CASES = [
    (3, 64, 41, 39, 7, 2, (3, 3, 3, 3), 3),  # ResNet's stem, small: tiles of 3 rows, a partial last one
    (3, 13, 30, 31, 3, 2, (1, 1, 1, 1), 4),  # partial panels, odd sizes
    (2, 7, 17, 23, 3, 1, (0, 2, 1, 0), 5),  # uneven padding, stride 1
    (5, 200, 9, 40, 3, 1, (1, 1, 1, 1), 2),  # enough panels and rows for the strip copy
    (3, 32, 20, 20, 3, 2, (1, 1, 1, 1), 10),  # one tile for the whole image
]


@pytest.mark.parametrize("act", ["relu", "clip", "silu", "gelu"])
@pytest.mark.parametrize("case", range(len(TILE_CASES)))
def test_conv_tiles_match_a_direct_convolution(case, act):
    """``PackedWeight.run_tiles`` against a float64 direct convolution: every tile kind, bias
    and activation; nothing written past the output."""
    c, oc, h, wd, k, stride, pad, rows = TILE_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal((c, h, wd)).astype(np.float32)
    w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = ACTS[act](_direct_conv(x, w, b, stride, pad))
    oh, ow = want.shape[1:]
    packed = panels.PackedWeight.of(w, b)
    geometry = (k, k, stride, stride, pad[0], pad[1], 1, 1)
    guard = np.full(oc * oh * ow + 16, np.nan, np.float32)
    out = guard[:oc * oh * ow].reshape(oc, oh, ow)
    packed.run_tiles(x, out, _code(act), geometry, rows, np.empty(c * k * k * rows * ow, np.float32))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    assert np.isnan(guard[oc * oh * ow:]).all()


def test_conv_tiles_from_eight_threads():
    c, oc, h, wd, k, stride, pad, rows = TILE_CASES[0]
    rng = np.random.default_rng(9)
    w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    images = [rng.standard_normal((c, h, wd)).astype(np.float32) for _ in range(8)]
    packed = panels.PackedWeight.of(w, b)
    geometry = (k, k, stride, stride, pad[0], pad[1], 1, 1)
    wants = [ACTS["relu"](_direct_conv(image, w, b, stride, pad)) for image in images]
    oh, ow = wants[0].shape[1:]

    def call(i):
        outs = []
        for _ in range(10):
            out = np.empty((oc, oh, ow), np.float32)
            packed.run_tiles(images[i], out, _code("relu"), geometry, rows, np.empty(c * k * k * rows * ow, np.float32))
            outs.append(out)
        return outs

    results = from_threads(call)
    for i, want in enumerate(wants):
        for got in results[i]:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
@pytest.mark.parametrize("batch", [1, 2])
def test_plugins_run_their_stems_in_tiles_on_the_panel_gemm(monkeypatch, backend, batch):
    """A convolution of few rows of columns (but more input channels than a direct stem,
    ``direct.MAX_CHANNELS``) over a map whose column matrix exceeds twice
    ``panels.TILE_BYTES`` runs in tiles on one thread, image by image, and matches reference."""
    import lowerkit as lk
    from lowerkit import nn

    calls = []
    real = panels.PackedWeight.run_tiles
    monkeypatch.setattr(panels.PackedWeight, "run_tiles", lambda self, *a: (calls.append(a[0].shape), real(self, *a))[1])
    net = nn.Sequential(nn.Conv2d(6, 8, 3, stride=2, padding=1), nn.ReLU6(), nn.Conv2d(8, 4, 1))
    x = np.random.default_rng(2).standard_normal((batch, 6, 150, 150)).astype(np.float32)
    module = lk.trace(net, x)
    got = lk.to_backend(module, backend, {"forward": {"threads": 1}})(x)
    want = lk.to_backend(module, "reference")(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    assert set(calls) == {(6, 150, 150)} and len(calls) >= batch and len(calls) % batch == 0, calls  # (and dry runs)


def _pointwise_module(batch):
    import lowerkit as lk
    from lowerkit import nn

    net = nn.Sequential(nn.Conv2d(8, 24, 1), nn.ReLU6(), nn.Conv2d(24, 12, 1), nn.BatchNorm2d(12), nn.SiLU(),
                        nn.Conv2d(12, 20, 3, padding=1))
    x = np.random.default_rng(1).standard_normal((batch, 8, 11, 9)).astype(np.float32)
    return lk.trace(net, x), x


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
@pytest.mark.parametrize("batch", [1, 3])
def test_plugins_run_their_1x1_layers_on_the_panel_gemm(monkeypatch, backend, batch):
    import lowerkit as lk

    if batch == 1:
        from tests.team_calls import team_on_small_layers

        team_on_small_layers(monkeypatch)  # batch 1: the team form
    module, x = _pointwise_module(batch)
    ran: list[str] = []
    for name in ("run", "run_team"):
        original = getattr(panels.PackedWeight, name)
        monkeypatch.setattr(panels.PackedWeight, name,
                            lambda self, *a, _f=original, _n=name: (ran.append(_n), _f(self, *a))[1])
    lowered = lk.to_backend(module, [backend, "reference"] if backend == "nnpack" else backend)
    expected = lk.to_backend(module, "reference")(x)
    got = lowered(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-4)
    assert ran, "no 1x1 layer ran on the panel GEMM"


def test_glow_like_runs_a_gated_1x1_layer_on_the_panel_gemm_in_a_team(monkeypatch):
    """A squeeze-excitation gate folded into the next 1x1 convolution (``glow.gated_conv2d``):
    at batch 1 on a team its GEMM is the panel GEMM's gated region, against reference."""
    import lowerkit as lk
    from lowerkit import nn
    from tests.team_calls import team_on_small_layers

    team_on_small_layers(monkeypatch)
    monkeypatch.setattr(panels, "_RULES", ["wide"])  # the panel GEMM takes every layer
    ran: list[int] = []
    original = panels.PackedWeight.bind_team_gated

    def spy(self, *args):  # glow_like binds the gated region once; record each call of it
        call = original(self, *args)
        return lambda: (ran.append(self.k), call())

    monkeypatch.setattr(panels.PackedWeight, "bind_team_gated", spy)

    from lowerkit.models._common import SqueezeExcitation

    net = nn.Sequential(nn.Conv2d(8, 24, 1), nn.SiLU(), SqueezeExcitation(24, 6, "silu", "sigmoid"),
                        nn.Conv2d(24, 10, 1))
    x = np.random.default_rng(2).standard_normal((1, 8, 13, 11)).astype(np.float32)
    module = lk.trace(net, x)
    got = lk.to_backend(module, "glow_like")(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(lk.to_backend(module, "reference")(x)), rtol=1e-4,
                               atol=1e-5)
    assert ran and set(ran) == {24}, "the gated 1x1 layer did not run on the panel GEMM"


def test_shared_packs_a_constant_weight_once_and_never_a_writable_one():
    w, _, b = _case(10, 12, 1)
    w.flags.writeable = False
    b.flags.writeable = False
    first = panels.PackedWeight.shared(w, b)
    assert first is not None and panels.PackedWeight.shared(w, b) is first  # every thread binding
    other_bias = (b + 1).astype(np.float32)
    other_bias.flags.writeable = False
    assert panels.PackedWeight.shared(w, other_bias) is not first
    assert panels.PackedWeight.shared(w.reshape(10, 3, 2, 2), None) is not None  # [M, ...] weights
    assert panels.PackedWeight.shared(np.ones((4, 4), np.float32), None) is None  # given at call time
    assert panels.PackedWeight.shared(w, np.ones(10, np.float32)) is None


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("kernel", [1, 3])
def test_a_weight_given_at_call_time_is_not_packed_at_bind(monkeypatch, batch, kernel):
    """The panel GEMM takes constant weights only: a weight that is a module input is in the
    arena, its values unknown while a layer binds (it must stay on sgemm and match reference)."""
    import lowerkit as lk

    if batch == 1:
        from tests.team_calls import team_on_small_layers

        team_on_small_layers(monkeypatch)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((batch, 6, 9, 9)).astype(np.float32)
    w = rng.standard_normal((10, 6, kernel, kernel)).astype(np.float32)
    module = lk.trace(lambda a, b: lk.ops.relu(lk.ops.conv2d(a, b, padding=kernel // 2)), x, w)
    lowered = lk.to_backend(module, "glow_like")
    expected = lk.to_backend(module, "reference")
    for scale in (1.0, -2.0):  # a second call with other weights
        np.testing.assert_allclose(np.asarray(lowered(x, w * scale)), np.asarray(expected(x, w * scale)),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 3])
def test_nnpack_packs_its_compiled_weight_and_follows_a_bias_given_at_call_time(batch):
    """nnpack's direct convolution on the panel GEMM: the compiled bias is a private copy (the
    caller's array changing later changes nothing, as for the weight); a bias passed with the
    call is used as it is at that call, also when the same array is changed in place."""
    from lowerkit_nnpack.conv import Conv2d, RunOptions
    from lowerkit_nnpack.geometry import ConvGeometry

    rng = np.random.default_rng(4)
    w = rng.standard_normal((10, 12, 1, 1)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    x = rng.standard_normal((batch, 12, 6, 7)).astype(np.float32)
    conv = Conv2d(ConvGeometry(12, 10, (6, 7), (1, 1), (1, 1), (0, 0, 0, 0)), w, b, algorithm="direct",
                  options=RunOptions(1))
    assert conv.impl._panel_fits

    def expected(bias):
        return np.einsum("ok,nkhw->nohw", w[:, :, 0, 0].astype(np.float64), x) + bias[None, :, None, None]

    np.testing.assert_allclose(conv(x), expected(b), rtol=1e-4, atol=1e-4)
    original = b.copy()
    b += 1  # the caller's array: the compiled bias was copied
    np.testing.assert_allclose(conv(x), expected(original), rtol=1e-4, atol=1e-4)
    given = np.zeros(10, np.float32)
    np.testing.assert_allclose(conv(x, bias=given), expected(given), rtol=1e-4, atol=1e-4)
    given += 3  # the same array, changed in place between calls
    np.testing.assert_allclose(conv(x, bias=given), expected(given), rtol=1e-4, atol=1e-4)
    assert conv.impl._panel is not None  # the calls ran on the panel GEMM


def test_glow_like_keeps_its_pool_forms_for_1x1_layers_and_takes_the_panel_gemm_on_one_thread(monkeypatch):
    """On the pool (intra-op workers, no team) a large 1x1 layer stays split between workers;
    on the calling thread the same layer runs on the panel GEMM. Both match numpy."""
    from lowerkit.backend.cpu import Parallel
    from lowerkit_glow_like.kernels.conv import prepare_conv

    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 64, 28, 28)).astype(np.float32)  # 2 x 25.7 MFLOP: above the split size
    w = rng.standard_normal((128, 64, 1, 1)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False  # constants, as glow_like binds them
    expected = np.einsum("ok,nkp->nop", w[:, :, 0, 0].astype(np.float64), x.reshape(2, 64, -1)) + b[:, None]
    ran: list[int] = []
    for name in ("run", "bind_images"):  # one image at a time, or the batch in one (bound) call
        original = getattr(panels.PackedWeight, name)
        monkeypatch.setattr(panels.PackedWeight, name, lambda self, *a, _f=original: (ran.append(1), _f(self, *a))[1])
    for parallel, on_panel in ((Parallel(2), False), (None, True)):
        ran.clear()
        out = np.empty((2, 128, 28, 28), np.float32)
        prepare_conv([x, w, b], [out], {}, None, parallel=parallel)()
        np.testing.assert_allclose(out.reshape(2, 128, -1), expected, rtol=1e-4, atol=1e-3)
        assert bool(ran) == on_panel


@pytest.mark.parametrize("stride", [1, 2])
def test_glow_like_runs_a_batch_of_7x7_maps_image_by_image_on_the_panel_gemm(monkeypatch, stride):
    """On one thread an im2col layer on maps of at most 128 pixels takes the panel GEMM image
    by image, not one sgemm over the batch (kernels/conv.py, PANEL_BEFORE_BATCH_PIXELS)."""
    import lowerkit as lk
    from lowerkit import nn

    net = nn.Sequential(nn.Conv2d(24, 30, 3, stride=stride, padding=1), nn.ReLU())
    x = np.random.default_rng(2).standard_normal((3, 24, 7 * stride, 7 * stride)).astype(np.float32)
    module = lk.trace(net, x)
    ran: list[int] = []
    original = panels.PackedWeight.run
    monkeypatch.setattr(panels.PackedWeight, "run", lambda self, a, *r: (ran.append(a.shape[1]), original(self, a, *r))[1])
    got = lk.to_backend(module, "glow_like", {"forward": {"threads": 1}})(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(lk.to_backend(module, "reference")(x)), rtol=1e-4, atol=1e-4)
    assert ran and set(ran) == {49} and len(ran) % 3 == 0  # per image, on its 49 columns (per run)


def test_winograd_tuples_take_the_panel_gemm_from_128_inputs_up_to_256_tiles_with_the_wide_tile(monkeypatch):
    monkeypatch.setattr(panels, "rules", lambda: "wide")
    assert panels.tuples_fit(128, 16) and panels.tuples_fit(512, 256)
    assert not panels.tuples_fit(64, 196)  # sgemm held its own with 64 inputs ...
    assert not panels.tuples_fit(128, 784)  # ... and over many tiles
    monkeypatch.setattr(panels, "rules", lambda: "avx512")
    assert not panels.tuples_fit(256, 16)  # not measured with 16-float vectors and the narrow tile


def test_winograd_tuples_take_the_panel_gemm_on_avx2_up_to_25088_floats_a_tuple(monkeypatch):
    monkeypatch.setattr(panels, "rules", lambda: "avx2")
    assert panels.tuples_fit(64, 196) and panels.tuples_fit(128, 196) and panels.tuples_fit(512, 16)
    assert panels.tuples_fit(32, 784)  # 25,088 floats: the limit itself
    assert not panels.tuples_fit(256, 196)  # sgemm held its own beyond it ...
    assert not panels.tuples_fit(64, 2048)  # ... and won over many tiles
    assert not panels.tuples_fit(16, 16)  # fewer inputs than measured
    monkeypatch.setenv(panels.TUPLES_ENV, "0")
    assert not panels.tuples_fit(64, 196)


def test_packed_tuples_are_shared_for_a_constant_weight_and_never_made_for_a_writable_one():
    u = np.random.default_rng(0).standard_normal((36, 7, 5)).astype(np.float32)
    assert panels.PackedTuples.shared(u) is None
    u.flags.writeable = False
    first = panels.PackedTuples.shared(u)
    assert first is panels.PackedTuples.shared(u) and (first.m, first.k, first.count) == (7, 5, 2)


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
@pytest.mark.parametrize("residual", [False, True])
def test_plugins_sample_a_strided_1x1_layer_then_multiply_every_image_at_once(monkeypatch, residual, backend):
    """On one thread a 1x1 convolution with a stride takes every image's sampled pixels in one
    strided copy, then the panel GEMM over all images (``bind_images`` / ``run_images``), with
    the reference's results — alone and as a residual block's downsample (its sum a pass after
    it)."""
    import lowerkit as lk
    from lowerkit import nn

    class Down(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Conv2d(20, 40, 3, stride=2, padding=1)
            self.down = nn.Conv2d(20, 40, 1, stride=2)

        def forward(self, x):
            y = self.down(x)
            return (y + self.main(x)).relu() if residual else y

    x = np.random.default_rng(3).standard_normal((3, 20, 15, 14)).astype(np.float32)  # odd size: 8x7 outputs
    module = lk.trace(Down(), x)
    bound: list[tuple[int, ...]] = []
    for name in ("bind_images", "run_images"):
        original = getattr(panels.PackedWeight, name)
        monkeypatch.setattr(panels.PackedWeight, name,
                            lambda self, a, *r, _f=original: (bound.append(a.shape), _f(self, a, *r))[1])
    got = lk.to_backend(module, backend, {"forward": {"threads": 1}})(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(lk.to_backend(module, "reference")(x)), rtol=1e-4, atol=1e-4)
    assert (3, 20, 56) in bound  # three images' 8x7 sampled pixels, one call


@pytest.mark.parametrize("backend", ["glow_like", "nnpack"])
def test_a_sampled_strided_1x1_layer_from_eight_threads(backend):
    """Each calling thread samples into its own scratch: eight threads calling one lowered
    1x1/2 layer at once all get the reference's results."""
    import lowerkit as lk
    from lowerkit import nn

    net = nn.Sequential(nn.Conv2d(24, 48, 1, stride=2), nn.ReLU())
    xs = [np.random.default_rng(20 + i).standard_normal((2, 24, 14, 14)).astype(np.float32) for i in range(8)]
    module = lk.trace(net, xs[0])
    lowered = lk.to_backend(module, backend, {"forward": {"threads": 1}})
    reference = lk.to_backend(module, "reference")
    results = from_threads(lambda i: [np.asarray(lowered(xs[i])) for _ in range(3)])
    for i, outs in results.items():
        expected = np.asarray(reference(xs[i]))
        for out in outs:
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
