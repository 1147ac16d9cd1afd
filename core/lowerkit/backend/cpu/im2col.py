"""Windows of padded NCHW images as strided views: im2col columns and transform tiles.

Both are read-only views that one ``np.copyto`` packs into a contiguous buffer (a GEMM
operand): no Python loop over kernel taps or tiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided


def pad_into(x: np.ndarray, dst: np.ndarray, top: int, left: int, value: float = 0.0) -> None:
    """Copy ``x`` [..., H, W] into ``dst`` [..., Hp, Wp] at (top, left) and set the border around it to ``value``.

    ``dst`` is typically reused scratch that holds other data: only the border is written
    besides the copy, never the whole buffer.
    """
    h, w = x.shape[-2], x.shape[-1]
    dst[..., :top, :] = value
    dst[..., top + h :, :] = value
    dst[..., top : top + h, :left] = value
    dst[..., top : top + h, left + w :] = value
    np.copyto(dst[..., top : top + h, left : left + w], x)


def im2col_view(
    src: np.ndarray,
    kernel: Sequence[int],
    out_hw: Sequence[int],
    stride: Sequence[int] = (1, 1),
    dilation: Sequence[int] = (1, 1),
) -> np.ndarray:
    """The read-only view ``[..., KH, KW, OH, OW]`` of ``src`` [..., Hp, Wp] (already padded):
    element ``[..., i, j, y, x]`` is ``src[..., y * sh + i * dh, x * sw + j * dw]``.

    Copied into a ``[..., KH, KW, OH, OW]`` buffer it is the im2col matrix
    ``[C * KH * KW, OH * OW]`` of each image (or, transposed, any other layout: the batch
    folded into the columns is ``view.transpose(1, 2, 3, 0, 4, 5)`` of an NCHW source).
    """
    (kh, kw), (oh, ow) = kernel, out_hw
    (sh, sw), (dh, dw) = stride, dilation
    _check_window(src.shape[-2:], (kh, kw), (oh, ow), (sh, sw), (dh, dw))
    lead, (s_h, s_w) = src.strides[:-2], src.strides[-2:]
    shape = src.shape[:-2] + (kh, kw, oh, ow)
    return as_strided(src, shape, lead + (s_h * dh, s_w * dw, s_h * sh, s_w * sw), writeable=False)


def tile_view(
    padded: np.ndarray, tile: Sequence[int], step: Sequence[int], count: Sequence[int]
) -> np.ndarray:
    """A read-only view ``[tile_h, tile_w, C, N, count_h, count_w]`` of overlapping tiles of ``padded`` [N, C, Hp, Wp].

    Tiles start every ``step`` pixels (Winograd F(m, r): ``m``; overlap-save FFT: ``T - k + 1``).
    "Position-major" layout: the transforms are GEMMs over the two leading axes and each
    tile position's channel GEMM reads one ``[C, N * tiles]`` matrix.
    """
    _check_window(padded.shape[-2:], tile, count, step, (1, 1))
    sn, sc, sh, sw = padded.strides
    n, c = padded.shape[:2]
    shape = (tile[0], tile[1], c, n, count[0], count[1])
    strides = (sh, sw, sc, sn, sh * step[0], sw * step[1])
    return as_strided(padded, shape=shape, strides=strides, writeable=False)


def _check_window(
    size: Sequence[int], kernel: Sequence[int], count: Sequence[int], stride: Sequence[int],
    dilation: Sequence[int],
) -> None:
    """Refuse a window view that would read outside its source (``as_strided`` does not check).

    The last element read along an axis is ``(count - 1) * stride + (kernel - 1) * dilation``;
    it must lie inside ``size``. O(1): kernels call this on every view they make, so no
    geometry reaches ``as_strided`` unchecked, whatever the caller validated before.
    """
    for axis in range(2):
        n, k, s, d = int(count[axis]), int(kernel[axis]), int(stride[axis]), int(dilation[axis])
        if n < 0 or k < 0 or s < 1 or d < 1:
            raise ValueError(
                f"window geometry out of range on axis {axis}: count {n}, kernel {k}, stride {s}, "
                f"dilation {d}"
            )
        if n and k and (n - 1) * s + (k - 1) * d >= int(size[axis]):
            raise ValueError(
                f"window view reads outside its {tuple(size)} source on axis {axis}: {n} windows of "
                f"{k} taps, stride {s}, dilation {d}"
            )


def merge_last(view: np.ndarray) -> np.ndarray:
    """``view`` [..., a, b] as [..., a * b] without copying (a writable view of the same memory).

    Raises ``ValueError`` unless the last two axes are contiguous with each other.
    """
    if view.strides[-2] != view.strides[-1] * view.shape[-1]:
        raise ValueError("last two axes are not contiguous")
    shape = view.shape[:-2] + (view.shape[-2] * view.shape[-1],)
    return as_strided(view, shape, view.strides[:-2] + (view.strides[-1],))
