"""Which compiled depthwise or pooling kernel fits a shape (plain Python: no numba)."""

from __future__ import annotations

# Depthwise 3x3 (stride 1 or 2) runs channels-last up to this many output pixels (16x16),
# rows above. Measured, one thread, ms rows vs channels-last: 7x7x960 0.135 vs 0.072,
# 14x14x576 0.181 vs 0.139, 28x28x192 0.127 vs 0.291, 56x56x144 0.276 vs 0.736.
CHANNELS_LAST_PIXELS = 256
# Other depthwise kernels (7x7, dilated, unequal strides; 5x5 but depthwise5x5's) have no row kernel of their own:
# channels-last up to 64x64 outputs, the generic direct kernel above.
CHANNELS_LAST_PIXELS_OTHER = 4096


# 3x3, stride 1, padding 1 all round (plane in = plane out, at least 3x3): flat passes
# over the whole plane, NCHW, no copies (``depthwise3x3_same``). One thread, batch 2, us,
# rows kernel (or channels-last pass, with its two transposing copies) vs flat:
# 960x7x7 301 (cl 158) vs 69, 576x14x14 411 (cl 328) vs 114, 384x14x14 274 vs 74,
# 192x28x28 295 vs 129, 144x56x56 666 vs 373, 32x112x112 439 vs 295.
SAME_MIN_SIDE = 3
# 3x3, stride 2, padding 1 top and left, even input sides: the four phases of each plane,
# then flat passes (``depthwise3x3_s2``), up to this many output pixels (128x128: the
# per-thread phase scratch stays at 256 KB). One thread, us, rows kernel / channels-last
# pass vs polyphase: 576x14x14 90 / 74 vs 53, 192x28x28 90 / 108 vs 60, 240x28x28 104 /
# 130 vs 75. Larger planes took the rows kernel while the phase split was a scalar loop
# (96x112x112 419 vs 586); split by vector shuffles (``_simd.split_pairs``), same process:
# rows 417 vs polyphase 301, 144x56x56 227 vs 121 (the scalar split 213).
S2_MAX_PIXELS = 128 * 128


# 5x5, stride 1 or 2, undilated: zero-bordered phases of each plane, NCHW
# (``depthwise5x5``). One thread, batch 1, us, channels-last pass with its two copies vs
# phases: 144x56x56 stride 2 656 vs 206, 240x28x28 613 vs 244, 672x14x14 500 vs 226,
# 672x14x14 stride 2 138 vs 149, 1152x7x7 194 vs 151.


def depthwise_algorithm(out_hw, kernel, stride, dilation, padding=None, in_hw=None) -> str:
    """``depthwise3x3_same``, ``depthwise3x3_s2``, ``depthwise5x5``, ``depthwise_cl``,
    ``depthwise3x3`` or ``grouped`` (the generic direct kernel) for a depthwise convolution
    (one input channel per output channel); ``padding`` (top, left, bottom, right) and
    ``in_hw``, when given, admit the first three."""
    pixels = out_hw[0] * out_hw[1]
    three = tuple(kernel) == (3, 3) and tuple(dilation) == (1, 1) and padding is not None
    if (three and tuple(stride) == (1, 1) and tuple(padding) == (1, 1, 1, 1)
            and min(out_hw) >= SAME_MIN_SIDE):
        return "depthwise3x3_same"
    if (three and in_hw is not None and tuple(stride) == (2, 2) and tuple(padding[:2]) == (1, 1)
            and in_hw[0] % 2 == 0 and in_hw[1] % 2 == 0 and tuple(out_hw) == (in_hw[0] // 2, in_hw[1] // 2)
            and min(out_hw) >= 2 and pixels <= S2_MAX_PIXELS):
        return "depthwise3x3_s2"
    if (tuple(kernel) == (5, 5) and tuple(dilation) == (1, 1) and padding is not None
            and stride[0] == stride[1] and stride[0] in (1, 2)):
        return "depthwise5x5"
    if tuple(kernel) == (3, 3) and tuple(dilation) == (1, 1) and stride[0] == stride[1] and stride[0] in (1, 2):
        return "depthwise_cl" if pixels <= CHANNELS_LAST_PIXELS else "depthwise3x3"
    return "depthwise_cl" if pixels <= CHANNELS_LAST_PIXELS_OTHER else "grouped"


def padded_hw(out_hw, kernel, stride, dilation) -> tuple[int, int]:
    """Rows and columns of the padded image a channels-last depthwise pass reads."""
    return tuple((o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(out_hw, kernel, stride, dilation))


def max_pool3x3_fits(kernel, stride, padding, dilation, in_hw, out_hw) -> bool:
    """True where the compiled ``pool.max_pool3x3`` applies (``padding`` starts top, left): a 3x3 undilated window, equal strides 1 or 2,
    and no window lying wholly on padding (at most 2 padded rows or columns on any side)."""
    (h, w), (oh, ow) = in_hw, out_hw
    s = stride[0]
    if tuple(kernel) != (3, 3) or tuple(dilation) != (1, 1) or stride[0] != stride[1] or s not in (1, 2):
        return False
    pt, pl = padding[0], padding[1]
    pb, pr = (oh - 1) * s + 3 - h - pt, (ow - 1) * s + 3 - w - pl
    return min(h, w) > 0 and max(pt, pl, pb, pr) <= 2 and min(pt, pl) >= 0
