"""Sliding-window geometry shared by convolution and pooling kernels.

For each kernel tap (kh, kw) the output positions whose input position lies inside the
input form a rectangle; copying that rectangle with one strided slice replaces padding.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tap:
    """One kernel tap: output rectangle [oh0:oh1, ow0:ow1] reads input slice rows/cols."""

    kh: int
    kw: int
    oh0: int
    oh1: int
    ow0: int
    ow1: int
    rows: slice
    cols: slice


def _valid(out_size: int, in_size: int, stride: int, offset: int) -> tuple[int, int]:
    """Output range [lo, hi) with 0 <= o*stride + offset < in_size."""
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    hi = min(out_size, (in_size - 1 - offset) // stride + 1)
    return lo, max(lo, hi)


def taps(
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, ...],
    dilation: tuple[int, int] = (1, 1),
) -> list[Tap]:
    """Every kernel tap with its valid output rectangle (possibly empty) and input slices."""
    (h, w), (oh, ow), (kh_n, kw_n) = in_hw, out_hw, kernel
    (sh, sw), (dh, dw) = stride, dilation
    pt, pl = padding[0], padding[1]
    result = []
    for kh in range(kh_n):
        r_off = kh * dh - pt
        oh0, oh1 = _valid(oh, h, sh, r_off)
        for kw in range(kw_n):
            c_off = kw * dw - pl
            ow0, ow1 = _valid(ow, w, sw, c_off)
            rows = slice(oh0 * sh + r_off, (oh1 - 1) * sh + r_off + 1, sh) if oh1 > oh0 else slice(0, 0)
            cols = slice(ow0 * sw + c_off, (ow1 - 1) * sw + c_off + 1, sw) if ow1 > ow0 else slice(0, 0)
            result.append(Tap(kh, kw, oh0, oh1, ow0, ow1, rows, cols))
    return result
