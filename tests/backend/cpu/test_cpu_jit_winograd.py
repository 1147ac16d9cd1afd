"""The compiled F(4x4, 3x3) transforms (lowerkit.backend.cpu.jit.winograd) against numpy's
matrix products with the same matrices: every tile, cropped edges, images after the first."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from lowerkit.backend.cpu import input_scratch_floats, jit, output_group_tiles, winograd_matrices  # noqa: E402

AT, _, BT = (m.astype(np.float32) for m in winograd_matrices(4, 3))
NO_RESIDUAL = np.empty((0, 0, 0, 0), np.float32)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _tiles(h: int, w: int) -> tuple[int, int]:
    return -(-h // 4), -(-w // 4)


def _output_reference(m, bias, residual, n, oh, ow, th, tw, act):
    """act(A^T m A + bias + residual) tile by tile, cropped: [n, OC, oh, ow]."""
    oc = m.shape[1]
    full = np.zeros((n, oc, 4 * th, 4 * tw), np.float64)
    tiles = m.astype(np.float64).reshape(6, 6, oc, n, th, tw)
    at = AT.astype(np.float64)
    y = np.einsum("ra,abonyx,cb->onyrxc", at, tiles, at)  # [oc, n, th, 4, tw, 4]
    full[:] = y.reshape(oc, n, 4 * th, 4 * tw).transpose(1, 0, 2, 3)
    out = full[:, :, :oh, :ow] + bias.reshape(1, -1, 1, 1)
    if residual is not None:
        out = out + residual
    return act(out)


ACTIVATIONS = {
    "none": ({}, lambda a: a),
    "relu": ({"act": "relu"}, lambda a: np.maximum(a, 0)),
    "relu6": ({"act": "clip", "act_min": 0.0, "act_max": 6.0}, lambda a: np.clip(a, 0, 6)),
}


# The output transform's entry point, which picks, and both its forms, on every machine.
OUTPUT_FORMS = ["winograd_output", "winograd_output_planes", "winograd_output_rows"]


@pytest.mark.parametrize("form", OUTPUT_FORMS)
@pytest.mark.parametrize("n, oc, oh, ow", [(1, 3, 9, 10), (3, 5, 7, 7), (2, 4, 13, 6), (1, 2, 56, 56), (2, 2, 30, 70)])
@pytest.mark.parametrize("group", ["row", "odd", "default"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_output_transform_matches_numpy_for_any_group_of_tile_rows(form, n, oc, oh, ow, group, residual, activation):
    """Passes over one tile row, over 2 rows and a bit (groups end mid-image and run on into
    the next image), and over output_group_tiles: the same outputs, the numpy ones; the rows
    form over tile rows of fewer and of more than 16 tiles, cropped at the right and bottom."""
    attrs, act = ACTIVATIONS[activation]
    th, tw = _tiles(oh, ow)
    tiles = {"row": tw, "odd": 2 * tw + 1, "default": output_group_tiles(tw)}[group]
    m, bias = _rand(36, oc, n * th * tw, seed=1), _rand(oc, seed=2)
    res = _rand(n, oc, oh, ow, seed=3) if residual else None
    out = np.full((n, oc, oh, ow), np.nan, np.float32)
    getattr(jit.load("winograd"), form)(m, bias, out, 0, oc, 0, n, th, tw, *jit.activation_code(attrs),
                                        np.empty((6, 4, tiles), np.float32), np.empty((4, 4, tiles), np.float32),
                                        NO_RESIDUAL if res is None else res)
    want = _output_reference(m, bias, res, n, oh, ow, th, tw, act)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n, oc, oh, ow", [(1, 3, 9, 10), (3, 5, 7, 7), (2, 2, 30, 70), (1, 2, 56, 56)])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("code", [0, 2, 5])
def test_output_transform_forms_agree_bit_for_bit(n, oc, oh, ow, residual, code):
    """The rows form computes the planes form's sums in the same order (no activation, clip,
    SiLU): the network's outputs do not depend on which one the machine runs."""
    th, tw = _tiles(oh, ow)
    m, bias = _rand(36, oc, n * th * tw, seed=11), _rand(oc, seed=12)
    res = _rand(n, oc, oh, ow, seed=13) if residual else NO_RESIDUAL
    kernels, group = jit.load("winograd"), output_group_tiles(tw)
    results = []
    for form in (kernels.winograd_output_planes, kernels.winograd_output_rows):
        out = np.full((n, oc, oh, ow), np.nan, np.float32)
        form(m, bias, out, 0, oc, 0, n, th, tw, code, -1.0, 1.0, np.empty((6, 4, group), np.float32),
             np.empty((4, 4, group), np.float32), res)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])


def test_output_transform_rows_form_refuses_the_gelus():
    m = _rand(36, 1, 4)
    out = np.empty((1, 1, 8, 8), np.float32)
    with pytest.raises(ValueError, match="GELU"):
        jit.load("winograd").winograd_output_rows(m, np.empty(0, np.float32), out, 0, 1, 0, 1, 2, 2,
                                                  *jit.activation_code({"act": "gelu"}), np.empty((6, 4, 2), np.float32),
                                                  np.empty((4, 4, 2), np.float32), NO_RESIDUAL)


@pytest.mark.parametrize("form", OUTPUT_FORMS)
@pytest.mark.parametrize("oh, ow", [(11, 9), (9, 30)])
def test_output_transform_writes_only_its_channels_and_images(form, oh, ow):
    """A band of channels [o0, o1) of images [i0, i0 + k): m holds the band's channels and
    those images' tiles; nothing else of the output is written."""
    n, oc = 4, 6
    th, tw = _tiles(oh, ow)
    o0, o1, i0, k = 2, 5, 1, 2
    m, bias = _rand(36, o1 - o0, k * th * tw, seed=4), _rand(oc, seed=5)
    out = np.full((n, oc, oh, ow), np.nan, np.float32)
    group = output_group_tiles(tw)
    getattr(jit.load("winograd"), form)(m, bias, out, o0, o1, i0, k, th, tw, 0, 0.0, 0.0,
                                        np.empty((6, 4, group), np.float32), np.empty((4, 4, group), np.float32),
                                        NO_RESIDUAL)
    want = _output_reference(m, bias[o0:o1], None, k, oh, ow, th, tw, lambda a: a)
    np.testing.assert_allclose(out[i0:i0 + k, o0:o1], want, rtol=1e-5, atol=1e-4)
    written = np.zeros(out.shape, bool)
    written[i0:i0 + k, o0:o1] = True
    assert np.isnan(out[~written]).all()


def test_output_group_tiles_holds_at_least_one_tile_row():
    assert output_group_tiles(3) >= 3
    assert output_group_tiles(1000) == 1000


def _input_reference(x, pt, pl, th, tw):
    """v[6 a + b, c, t] = (B^T d B)[a, b] of each 6x6 tile d of the zero-padded images."""
    n, c, h, w = x.shape
    padded = np.zeros((n, c, 4 * th + 2, 4 * tw + 2), np.float64)
    rows, cols = min(h, 4 * th + 2 - pt), min(w, 4 * tw + 2 - pl)
    src = x[:, :, max(0, -pt):, max(0, -pl):].astype(np.float64)
    padded[:, :, max(0, pt):max(0, pt) + rows, max(0, pl):max(0, pl) + cols] = src[:, :, :rows, :cols]
    tiles = np.stack([np.stack([padded[:, :, 4 * i:4 * i + 6, 4 * j:4 * j + 6] for j in range(tw)], 2)
                      for i in range(th)], 2)  # [n, c, th, tw, 6, 6]
    bt = BT.astype(np.float64)
    v = np.einsum("ar,nctwrs,bs->abcntw", bt, tiles, bt)
    return v.reshape(36, c, n * th * tw)


# The input transform's entry point, which picks, and both its forms, on every machine.
INPUT_FORMS = ["winograd_input", "winograd_input_planes", "winograd_input_gathered", "winograd_input_rows"]
INPUT_SHAPES = [(1, 3, 9, 10, 1), (2, 5, 7, 7, 1), (1, 4, 56, 56, 1), (3, 2, 13, 35, 1), (1, 2, 6, 6, 0),
                (1, 3, 9, 10, 2), (2, 4, 33, 66, 1), (3, 3, 14, 14, 1), (5, 2, 5, 3, 1)]


@pytest.mark.parametrize("form", INPUT_FORMS)
@pytest.mark.parametrize("n, c, h, w, pad", INPUT_SHAPES)
def test_input_transform_matches_numpy(form, n, c, h, w, pad):
    """Maps whose tile rows hold fewer than 8 tiles (one by one), 8 or more (split 8 at a
    time) and both; padding 0-2; images after the first; for the gathered form, tiles that
    fill 16 lanes, leave some empty, and run from one image into the next; for the rows form,
    tile rows of fewer and of more than 16 tiles."""
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = _tiles(oh, ow)
    x = _rand(n, c, h, w, seed=7)
    v = np.full((36, c, n * th * tw), np.nan, np.float32)
    getattr(jit.load("winograd"), form)(x, v, pad, pad, th, tw, 0, n, 0, c,
                                        np.full(input_scratch_floats(th, tw), np.nan, np.float32))
    np.testing.assert_allclose(v, _input_reference(x, pad, pad, th, tw), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n, c, h, w, pad", INPUT_SHAPES + [(2, 3, 9, 13, 0), (1, 2, 5, 6, 2)])
def test_input_transform_forms_agree_bit_for_bit(n, c, h, w, pad):
    """The gathered and rows forms compute the same sums in the same order as the planes
    form: the network's outputs do not depend on which one the machine runs."""
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = _tiles(oh, ow)
    x = _rand(n, c, h, w, seed=9)
    kernels = jit.load("winograd")
    results = []
    for form in (kernels.winograd_input_planes, kernels.winograd_input_gathered, kernels.winograd_input_rows):
        v = np.full((36, c, n * th * tw), np.nan, np.float32)
        form(x, v, pad, pad, th, tw, 0, n, 0, c, np.zeros(input_scratch_floats(th, tw), np.float32))
        results.append(v)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


@pytest.mark.parametrize("form", INPUT_FORMS)
@pytest.mark.parametrize("h, w", [(11, 17), (13, 5)])
def test_input_transform_writes_only_its_channels_and_images(form, h, w):
    n, c = 3, 6
    th, tw = _tiles(h, w)
    x = _rand(n, c, h, w, seed=8)
    v = np.full((36, c, 2 * th * tw), np.nan, np.float32)  # images 1 and 2: their tiles from 0
    scratch = np.empty(input_scratch_floats(th, tw), np.float32)
    getattr(jit.load("winograd"), form)(x, v, 1, 1, th, tw, 1, 2, 2, 5, scratch)
    want = _input_reference(x[1:], 1, 1, th, tw)
    np.testing.assert_allclose(v[:, 2:5], want[:, 2:5], rtol=1e-5, atol=1e-4)
    assert np.isnan(v[:, :2]).all() and np.isnan(v[:, 5:]).all()


@pytest.mark.parametrize("form", ["winograd_input", "winograd_input_planes"])
def test_input_transform_refuses_a_scratch_too_small(form):
    x = _rand(1, 2, 8, 8)
    v = np.empty((36, 2, 4), np.float32)
    with pytest.raises(ValueError, match="input_scratch_floats"):
        getattr(jit.load("winograd"), form)(x, v, 1, 1, 2, 2, 0, 1, 0, 2,
                                            np.empty(input_scratch_floats(2, 2) - 1, np.float32))


def test_gathered_input_transform_refuses_a_scratch_under_its_table():
    x = _rand(1, 2, 8, 8)
    v = np.empty((36, 2, 4), np.float32)
    with pytest.raises(ValueError, match="48 floats"):
        jit.load("winograd").winograd_input_gathered(x, v, 1, 1, 2, 2, 0, 1, 0, 2, np.empty(47, np.float32))
