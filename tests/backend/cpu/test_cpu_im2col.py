"""Windows of padded images as views (lowerkit.backend.cpu.im2col), against plain loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowerkit.backend.cpu import im2col_view, merge_last, pad_into, tile_view


def test_pad_into_writes_the_border_and_the_image_only():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    dst = np.full((2, 6, 7), 99.0, np.float32)  # stale scratch
    pad_into(x, dst, 1, 2, value=-1.0)
    want = np.pad(x, ((0, 0), (1, 2), (2, 1)), constant_values=-1.0)
    np.testing.assert_array_equal(dst, want)


@settings(max_examples=40, deadline=None)
@given(
    c=st.integers(1, 3), h=st.integers(1, 7), w=st.integers(1, 7), kh=st.integers(1, 3), kw=st.integers(1, 3),
    sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
)
def test_im2col_view_is_the_column_matrix(c, h, w, kh, kw, sh, sw, dh, dw):
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        return
    x = np.random.default_rng(0).standard_normal((2, c, h, w))
    view = im2col_view(x, (kh, kw), (oh, ow), (sh, sw), (dh, dw))
    assert view.shape == (2, c, kh, kw, oh, ow) and not view.flags.writeable
    want = np.empty(view.shape)
    for i in range(kh):
        for j in range(kw):
            for y in range(oh):
                for xx in range(ow):
                    want[:, :, i, j, y, xx] = x[:, :, y * sh + i * dh, xx * sw + j * dw]
    np.testing.assert_array_equal(view, want)


def test_im2col_columns_times_weights_is_a_convolution():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    padded = np.zeros((3, 7, 7))
    pad_into(x, padded, 1, 1)
    cols = np.ascontiguousarray(im2col_view(padded, (3, 3), (5, 5))).reshape(27, 25)
    got = (w.reshape(4, 27) @ cols).reshape(4, 5, 5)
    want = np.einsum("ocij,cyxij->oyx", w, np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2)))
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_tile_view_gathers_overlapping_tiles_position_major():
    padded = np.random.default_rng(2).standard_normal((2, 3, 10, 10))
    view = tile_view(padded, (6, 6), (4, 4), (2, 2))
    assert view.shape == (6, 6, 3, 2, 2, 2)
    for ty in range(2):
        for tx in range(2):
            tile = padded[:, :, 4 * ty : 4 * ty + 6, 4 * tx : 4 * tx + 6]  # [N, C, 6, 6]
            np.testing.assert_array_equal(view[:, :, :, :, ty, tx], tile.transpose(2, 3, 1, 0))


def test_merge_last_is_a_writable_view_and_refuses_gaps():
    a = np.zeros((2, 3, 4, 5))
    merged = merge_last(a[:, :, 1:3])
    assert merged.shape == (2, 3, 10)
    merged[...] = 1
    assert a[:, :, 1:3].all() and not a[:, :, 0].any() and not a[:, :, 3].any()
    with pytest.raises(ValueError, match="not contiguous"):
        merge_last(a[:, :, :, 1:3])


@pytest.mark.parametrize(
    "kernel, out_hw, stride, dilation",
    [
        ((3, 3), (4, 4), (1_000_000_000, 1), (1, 1)),  # issue 12: read far outside the image
        ((3, 3), (1, 1), (1, 1), (1_000_000, 1_000_000)),
        ((3, 3), (6, 6), (0, 0), (1, 1)),
        ((3, 3), (7, 6), (1, 1), (1, 1)),  # one output row too many
    ],
)
def test_window_views_refuse_geometry_that_reads_outside_the_source(kernel, out_hw, stride, dilation):
    src = np.zeros((2, 8, 8), np.float32)
    with pytest.raises(ValueError, match="window"):
        im2col_view(src, kernel, out_hw, stride, dilation)


def test_tile_view_refuses_tiles_past_the_padded_image():
    padded = np.zeros((1, 2, 10, 10), np.float32)
    tile_view(padded, (6, 6), (4, 4), (2, 2))  # tiles end at row 4 + 6 = 10: fits
    with pytest.raises(ValueError, match="window view reads outside"):
        tile_view(padded, (6, 6), (4, 4), (3, 2))


@pytest.mark.parametrize("c, hw, k, stride, pad, dil", [
    (3, (17, 16), (7, 7), (2, 2), (3, 3), (1, 1)),
    (4, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, (10, 7), (3, 3), (2, 2), (1, 0), (1, 1)),
    (2, (8, 9), (3, 2), (3, 2), (2, 1), (2, 1)),
    (5, (6, 6), (1, 1), (2, 2), (0, 0), (1, 1)),
    (1, (3, 4), (3, 3), (1, 1), (2, 2), (1, 1)),
    (2, (5, 5), (5, 5), (1, 1), (0, 0), (1, 1)),
    # "same" width, stride 1 (one shifted copy per tap and channel): 7x7 3x3, 5x5 on planes
    # narrower than tall, 3x5 with a taller output (rows of padding), a 1x1
    (3, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, (6, 5), (5, 5), (1, 1), (2, 2), (1, 1)),
    (2, (5, 9), (3, 5), (1, 1), (2, 2), (1, 1)),
    (3, (4, 6), (1, 1), (1, 1), (0, 0), (1, 1)),
])
def test_compiled_im2col_matches_the_window_view(c, hw, k, stride, pad, dil):
    pytest.importorskip("numba")
    from lowerkit.backend.cpu import jit

    (h, w), (pt, pl) = hw, pad
    out_hw = tuple((n + 2 * p - d * (kk - 1) - 1) // s + 1 for n, p, d, kk, s in zip(hw, pad, dil, k, stride))
    x = np.random.default_rng(c * h).standard_normal((c, h, w)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (pt, pt), (pl, pl)))
    expected = np.ascontiguousarray(im2col_view(padded, k, out_hw, stride, dil))
    col = np.full((c * k[0] * k[1],) + out_hw, np.nan, np.float32)
    kernel = jit.load("conv").im2col
    split = out_hw[0] // 2  # two row bands, as two workers fill them
    for first, last in ((0, split), (split, out_hw[0])):
        kernel(x, col, *k, *stride, pt, pl, *dil, first, last)
    np.testing.assert_array_equal(col.reshape(expected.shape), expected)


@settings(max_examples=60, deadline=None)
@given(
    c=st.integers(1, 4), h=st.integers(1, 9), w=st.integers(1, 9), kh=st.integers(1, 5), kw=st.integers(1, 5),
    sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
    pt=st.integers(0, 3), pl=st.integers(0, 3), split=st.integers(0, 9),
)
def test_compiled_im2col_is_the_column_matrix(c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, split):
    """jit.conv.im2col (stride 1 has a kernel of its own) writes every row band exactly, padding as zeros."""
    pytest.importorskip("numba")
    from lowerkit.backend.cpu.jit import conv

    pb, pr = pt, pl  # symmetric padding
    oh, ow = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        return
    x = np.random.default_rng(3).standard_normal((c, h, w)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (pt, pb), (pl, pr)))
    want = np.ascontiguousarray(im2col_view(padded, (kh, kw), (oh, ow), (sh, sw), (dh, dw))).reshape(c * kh * kw, oh, ow)
    got = np.full(want.shape, np.nan, np.float32)  # stale scratch: every element must be written
    cut = min(split, oh)
    conv.im2col(x, got, kh, kw, sh, sw, pt, pl, dh, dw, 0, cut)
    conv.im2col(x, got, kh, kw, sh, sw, pt, pl, dh, dw, cut, oh)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("w, kw, pl", [(56, 1, 0), (56, 3, 1), (57, 3, 1), (41, 5, 2), (112, 7, 3), (30, 3, 0)])
def test_compiled_stride_two_im2col_on_wide_rows(w, kw, pl):
    """Rows wide enough for the vector path of the stride-2 columns (``_simd.take_evens``),
    odd and even widths, padding on the left or none, the last row reading to the image's end."""
    pytest.importorskip("numba")
    from lowerkit.backend.cpu.jit import conv

    c, h, kh, pt = 3, 9, kw, pl
    oh, ow = (h + 2 * pt - kh) // 2 + 1, (w + 2 * pl - kw) // 2 + 1
    x = np.random.default_rng(w).standard_normal((c, h, w)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (pt, pt), (pl, pl)))
    want = np.ascontiguousarray(im2col_view(padded, (kh, kw), (oh, ow), (2, 2), (1, 1))).reshape(c * kh * kw, oh, ow)
    got = np.full(want.shape, np.nan, np.float32)
    conv.im2col(x, got, kh, kw, 2, 2, pt, pl, 1, 1, 0, oh)
    np.testing.assert_array_equal(got, want)
