"""Team kernels (lowerkit.backend.cpu.jit.team): each equals its serial kernel run over the
same bands, for 1-3 ways and odd sizes; the team GEMMs (row and column bands, the
fully-connected form) match numpy; and where numba's
threading layer is not OpenMP, team kernels are reported unusable."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import blas_limit, jit, team_layers  # noqa: E402
from lowerkit.backend.cpu.jit.cblas import sgemm  # noqa: E402
from lowerkit.backend.cpu.jit.layer import team_ready  # noqa: E402


@pytest.fixture(scope="module")
def kernels():
    if not team_ready():
        from lowerkit.backend.cpu.jit import layer

        pytest.skip(f"team kernels cannot run here: {layer.why_not()}")
    return jit.load("team"), jit.load("conv")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


ACTS = [("none", {}), ("relu", {}), ("clip", {"act_min": -0.5, "act_max": 0.5}), ("silu", {}), ("hardswish", {})]


def _act(i):
    name, extra = ACTS[i % len(ACTS)]
    return jit.activation_code({"act": name, **extra})


def _means_of(out: np.ndarray) -> np.ndarray:
    """The global average pool kernel's means of ``out``'s planes (what the depthwise kernels'
    fused ``means`` must equal bit for bit: both call ``pool.plane_mean``)."""
    pooled = np.empty((*out.shape[:2], 1, 1), np.float32)
    jit.load("pool").global_avg_pool2d(out, pooled, 0, out.shape[0] * out.shape[1])
    return pooled.reshape(-1)


def _nan_means(out_shape) -> tuple[np.ndarray, np.ndarray]:
    return np.full(out_shape[0] * out_shape[1], np.nan, np.float32), np.full(out_shape[0] * out_shape[1], np.nan,
                                                                               np.float32)


@pytest.mark.parametrize("ways", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 7, 9, 9), (2, 5, 3, 3), (1, 3, 14, 10)])
def test_depthwise_same_team_equals_serial(kernels, shape, ways):
    team, conv = kernels
    x, w, b = _rand(*shape), _rand(shape[1], 1, 3, 3, seed=1), _rand(shape[1], seed=2)
    expected, got = np.empty_like(x), np.empty_like(x)
    act = _act(ways)
    means_serial, means_team = _nan_means(shape)
    conv.depthwise3x3_same(x, w, b, expected, means_serial, *act, 0, shape[0] * shape[1])
    team.depthwise3x3_same(x, w, b, got, means_team, *act, ways)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(means_serial, _means_of(expected))
    np.testing.assert_array_equal(means_team, means_serial)


@pytest.mark.parametrize("ways", [1, 2, 3])
@pytest.mark.parametrize("shape, stride, pad", [((1, 7, 9, 9), 2, 1), ((2, 5, 8, 6), 1, 1), ((1, 3, 12, 10), 2, 0)])
def test_max_pool3x3_team_equals_serial(kernels, shape, stride, pad, ways):
    from lowerkit.backend.cpu import jit

    team, pool = kernels[0], jit.load("pool")
    x = _rand(*shape)
    oh, ow = ((d + 2 * pad - 3) // stride + 1 for d in shape[2:])
    expected = np.full((*shape[:2], oh, ow), np.nan, np.float32)
    got = expected.copy()
    pool.max_pool3x3(x, expected, stride, pad, pad, 0, shape[0] * shape[1])
    team.max_pool3x3(x, got, stride, pad, pad, ways)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ways", [2, 3])
def test_depthwise_stride2_team_equals_serial(kernels, ways):
    team, conv = kernels
    x, w, b = _rand(2, 5, 14, 10), _rand(5, 1, 3, 3, seed=1), np.empty(0, np.float32)
    out_shape = (2, 5, 7, 5)
    expected, got = np.empty(out_shape, np.float32), np.empty(out_shape, np.float32)
    means_serial, means_team = _nan_means(out_shape)
    conv.depthwise3x3_s2(x, w, b, np.empty(4 * 35, np.float32), expected, means_serial, *_act(1), 0, 10)
    team.depthwise3x3_s2(x, w, b, np.empty((ways, 4 * 35), np.float32), got, means_team, *_act(1), ways)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(means_serial, _means_of(expected))
    np.testing.assert_array_equal(means_team, means_serial)


@pytest.mark.parametrize("ways", [2, 3])
@pytest.mark.parametrize("channels", [16, 5])  # bands cut at blocks of 8; a block cut in two
@pytest.mark.parametrize("kernel,stride", [(3, 2), (5, 1), (7, 2)])
def test_depthwise_blocked_team_equals_serial(kernels, ways, channels, kernel, stride):
    from lowerkit.backend.cpu.jit.dwblock import blocked_scratch, blocked_table

    team, conv = kernels
    x, w, b = _rand(2, channels, 14, 10), _rand(channels, 1, kernel, kernel, seed=1), _rand(channels, seed=2)
    pad = kernel // 2
    out_hw = tuple((d + 2 * pad - kernel) // stride + 1 for d in (14, 10))
    geometry = ((14, 10), out_hw, kernel, stride, (pad, pad))
    table, floats = blocked_table(*geometry), blocked_scratch(*geometry)
    expected, got = np.empty((2, channels, *out_hw), np.float32), np.empty((2, channels, *out_hw), np.float32)
    from lowerkit.backend.cpu.jit.depthwise import NO_BLOCKS, blocked_weights

    means_serial, means_team = _nan_means((2, channels))
    conv.depthwise_blocked(x, w, b, NO_BLOCKS, table, np.empty(floats, np.float32), expected, means_serial, stride, pad,
                           pad, *_act(3), 0, 2 * channels)
    team.depthwise_blocked(x, w, b, blocked_weights(w, b), table, np.empty((ways, floats), np.float32), got, means_team,
                           stride, pad, pad, *_act(3), ways)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(means_serial, _means_of(expected))
    np.testing.assert_array_equal(means_team, means_serial)


@pytest.mark.parametrize("ways", [2, 3])
def test_grouped_and_channels_last_team_equal_serial(kernels, ways):
    team, conv = kernels
    x, b = _rand(1, 6, 9, 8), _rand(9, seed=3)
    w = _rand(9, 2, 3, 3, seed=1)  # 3 groups of 2 channels, 3 outputs each
    sh, sw, pt, pl, dh, dw, groups = 1, 2, 0, 1, 1, 1, 3
    expected = np.empty((1, 9, 7, 4), np.float32)
    got = np.empty_like(expected)
    conv.conv2d_grouped(x, w, b, expected, sh, sw, pt, pl, dh, dw, groups, *_act(2), 0, 9)
    team.conv2d_grouped(x, w, b, got, sh, sw, pt, pl, dh, dw, groups, *_act(2), ways)
    np.testing.assert_array_equal(got, expected)
    # the channels-last taps: padded [N, Hp, Wp, C] in, [N, OH*OW, C] out
    c = 7
    xp, wt, bias = _rand(2, 9, 9, c), _rand(25, c, seed=4), _rand(c, seed=5)
    expected, got = np.zeros((2, 25, c), np.float32), np.zeros((2, 25, c), np.float32)
    conv.depthwise_channels_last(xp, wt, bias, expected, 5, 5, 5, 5, 1, 1, 1, 1, *_act(4), 0, c)
    team.depthwise_channels_last(xp, wt, bias, got, 5, 5, 5, 5, 1, 1, 1, 1, *_act(4), ways)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ways", [2, 3])
def test_im2col_team_equals_serial(kernels, ways):
    team, conv = kernels
    x = _rand(3, 11, 13)
    geometry = (3, 3, 2, 2, 1, 1, 1, 1)  # 3x3, stride 2, padding 1
    expected, got = np.empty((27, 6, 7), np.float32), np.empty((27, 6, 7), np.float32)
    conv.im2col(x, expected, *geometry, 0, 6)
    team.im2col(x, got, *geometry, ways)
    np.testing.assert_array_equal(got, expected)


def _np_act(a, name, extra):
    if name == "none":
        return a
    if name == "relu":
        return np.maximum(a, 0)
    if name == "clip":
        return np.clip(a, extra["act_min"], extra["act_max"])
    if name == "silu":
        return a / (1 + np.exp(-a))
    return a * np.clip(a + 3, 0, 6) / 6  # hardswish


@pytest.mark.parametrize("by_columns", [False, True], ids=["rows", "columns"])
@pytest.mark.parametrize("ways", [1, 2, 3])
@pytest.mark.parametrize("m, k, n", [(5, 7, 9), (24, 16, 130), (1, 33, 4)])
def test_team_gemm_matches_numpy(kernels, m, k, n, ways, by_columns):
    team, _ = kernels
    fn = sgemm().function
    w, x = _rand(m, k), _rand(k, n, seed=1)
    for i, with_bias in enumerate((True, False)):
        bias = _rand(m, seed=2) if with_bias else np.empty(0, np.float32)
        act = ACTS[(m + ways + i) % len(ACTS)]
        out = np.full((m, n), np.nan, np.float32)
        with blas_limit(1):
            team.gemm_bias_activation(w, x, bias, out, *jit.activation_code({"act": act[0], **act[1]}), ways,
                                      by_columns, fn)
        expected = _np_act(w.astype(np.float64) @ x + (bias[:, None] if with_bias else 0), *act)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ways", [1, 2, 3])
def test_team_fully_connected_matches_numpy(kernels, ways):
    team, _ = kernels
    x, w, bias = _rand(3, 40), _rand(40, 17, seed=1), _rand(17, seed=2)
    out = np.full((3, 17), np.nan, np.float32)
    with blas_limit(1):
        team.fc_bias_activation(x, w, bias, out, *jit.activation_code({"act": "relu"}), ways, sgemm().function)
    np.testing.assert_allclose(out, np.maximum(x.astype(np.float64) @ w + bias, 0), rtol=1e-5, atol=1e-5)


def test_team_is_unusable_on_another_threading_layer():
    """A user who chose numba's workqueue layer gets no team kernels (and glow_like's
    programs then keep BLAS's threads) — checked in a fresh process."""
    code = ("from lowerkit.backend.cpu.jit.layer import team_ready, why_not; "
            "import numba; from numba import njit, prange\n"
            "print(team_ready())\nprint(why_not())\n")
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    ready, why = result.stdout.strip().splitlines()
    assert ready == "False"
    assert "'workqueue'" in why


@pytest.mark.parametrize("ways, tile_rows", [(1, 3), (2, 2), (3, 4)])
@pytest.mark.parametrize("geometry", [
    ((3, 17, 15), (5, 3, 7, 7), (2, 2), (3, 3)),  # a stem: 7x7 stride 2
    ((4, 9, 11), (6, 4, 3, 3), (1, 1), (1, 0)),  # 3x3, uneven padding
])
def test_tiled_implicit_gemm_matches_numpy(kernels, geometry, ways, tile_rows):
    team, _ = kernels
    (c, h, w_), (oc, _, kh, kw), (sh, sw), (pt, pl) = geometry
    x, w, bias = _rand(c, h, w_), _rand(oc, c, kh, kw, seed=1), _rand(oc, seed=2)
    oh, ow = (h + 2 * pt - kh) // sh + 1, (w_ + 2 * pl - kw) // sw + 1
    padded = np.pad(x.astype(np.float64), ((0, 0), (pt, pt), (pl, pl)))
    expected = np.empty((oc, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = padded[:, i * sh:i * sh + kh, j * sw:j * sw + kw]
            expected[:, i, j] = np.tensordot(w, patch, axes=3) + bias
    expected = np.maximum(expected, 0)
    out = np.full((oc, oh, ow), np.nan, np.float32)
    cols = np.empty((ways, c * kh * kw * tile_rows * ow), np.float32)
    with blas_limit(1):
        team.conv_tiles(x, w.reshape(oc, -1), bias, out, kh, kw, sh, sw, pt, pl, 1, 1, tile_rows, cols,
                        *jit.activation_code({"act": "relu"}), ways, sgemm().function)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ways", [1, 2, 3])
def test_winograd_team_equals_serial_transforms_and_products(kernels, ways):
    team, _ = kernels
    wino = jit.load("winograd")
    from lowerkit.backend.cpu import input_scratch_floats, winograd_matrices

    n, c, oc, h, w_ = 2, 5, 7, 9, 10
    x, bias = _rand(n, c, h, w_), _rand(oc, seed=2)
    _, g, _ = winograd_matrices(4, 3)  # U = G g G^T, [36, OC, C]
    u = np.einsum("ai,ocij,bj->aboc", g, _rand(oc, c, 3, 3, seed=1).astype(np.float64), g)
    u = np.ascontiguousarray(u.reshape(36, oc, c), dtype=np.float32)
    th, tw = 3, 3  # 4x4 tiles over the 9x10 output (padding 1)
    t = n * th * tw
    act = jit.activation_code({"act": "relu"})
    v_serial, v_team = np.empty((36, c, t), np.float32), np.empty((36, c, t), np.float32)
    floats = input_scratch_floats(th, tw)
    wino.winograd_input(x, v_serial, 1, 1, th, tw, 0, n, 0, c, np.empty(floats, np.float32))
    team.winograd_input(x, v_team, 1, 1, th, tw, 0, n, np.empty((ways, floats), np.float32), ways)
    np.testing.assert_array_equal(v_team, v_serial)
    expected, got = np.empty((n, oc, h, w_), np.float32), np.empty((n, oc, h, w_), np.float32)
    m = np.matmul(u, v_serial)
    wino.winograd_output(m, bias, expected, 0, oc, 0, n, th, tw, *act, np.empty((6, 4, tw), np.float32),
                         np.empty((4, 4, tw), np.float32), np.empty((0, 0, 0, 0), np.float32))
    band = -(-oc // ways)
    with blas_limit(1):
        team.winograd_products_output(u, v_team, bias, got, np.empty((ways, 36, band, t), np.float32),
                                      np.empty((ways, 6, 4, tw), np.float32), np.empty((ways, 4, 4, tw), np.float32),
                                      0, n, th, tw, *act, ways, sgemm().function, np.empty((0, 0, 0, 0), np.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ways", [1, 2, 3])
def test_winograd_panels_team_equals_the_serial_tuple_gemms(kernels, ways):
    """The team form on the packed U (bands of 6-channel panels) equals, bit for bit, the
    serial tuple GEMMs on all panels followed by the output transform, and matches U @ V."""
    from lowerkit.backend.cpu.panels import PackedTuples

    team, _ = kernels
    wino = jit.load("winograd")
    n, c, oc, h, w_ = 1, 20, 17, 9, 10  # 17 channels: a partial last panel
    th, tw = 3, 3
    t = n * th * tw + 2  # two columns past the images' (a chunk buffer wider than its images)
    u = _rand(36, oc, c, seed=3)
    u.flags.writeable = False
    packed = PackedTuples.shared(u)
    v = _rand(36, c, t, seed=4)
    bias, residual = _rand(oc, seed=5), _rand(n, oc, h, w_, seed=6)
    act = jit.activation_code({"act": "relu"})
    cols = n * th * tw
    m = np.full((36, oc, t), np.nan, np.float32)
    packed.run(v, m, cols)
    np.testing.assert_allclose(m[:, :, :cols], np.matmul(u, v[:, :, :cols]), rtol=1e-5, atol=1e-4)
    assert np.isnan(m[:, :, cols:]).all()  # columns past the images' are never written
    expected, got = np.empty((n, oc, h, w_), np.float32), np.empty((n, oc, h, w_), np.float32)
    wino.winograd_output(m, bias, expected, 0, oc, 0, n, th, tw, *act, np.empty((6, 4, tw), np.float32),
                         np.empty((4, 4, tw), np.float32), residual)
    shapes = team_layers.winograd_shapes(c, oc, t, (th, tw), ways)
    team.winograd_panels_output(packed.panels, packed.zeros, v, bias, got, np.empty(shapes["m"], np.float32),
                                np.empty(shapes["s"], np.float32), np.empty(shapes["y"], np.float32), 0, n, th, tw,
                                *act, ways, packed.columns, residual)
    np.testing.assert_array_equal(got, expected)


def test_tuple_gemms_fill_only_their_band_of_panels():
    """A band of whole panels lands in rows 0.. of each tuple's product, and the rows past the
    band are left alone; bands cover the channels in whole panels."""
    from lowerkit.backend.cpu.panels import PackedTuples

    c, oc, t = 12, 23, 7
    u = _rand(36, oc, c, seed=7)
    v = _rand(36, c, t, seed=8)
    packed = PackedTuples.of(u)
    m = np.full((36, 13, t), np.nan, np.float32)
    assert packed.takes(12, 23) and not packed.takes(12, 18 + 1) and not packed.takes(13, 18)
    packed.run(v, m, t, 12, 23)  # panels 2 and 3: channels 12-22 (the last panel has 5)
    np.testing.assert_allclose(m[:, :11], np.matmul(u[:, 12:23], v), rtol=1e-5, atol=1e-4)
    assert np.isnan(m[:, 11:]).all()
    assert packed.bands(3) == [(0, 12), (12, 18), (18, 23)] and packed.bands(4) == [(0, 6), (6, 12), (12, 18), (18, 23)]
