"""Which compiled depthwise or pooling kernel fits a shape (plain Python: no numba)."""

from __future__ import annotations

from .vectors import host_full_width

# Depthwise 3x3, 5x5 and 7x7 at stride 1 (3x3 at stride 2), undilated, on outputs at least this
# wide, where vectors hold 16 floats: straight on the NCHW rows (``depthwise_rows``, ``dwrows``;
# its docstring has the figures). Narrower, the blocked kernel stays ahead: one thread, four
# images, µs, blocked vs rows (Intel Xeon VM): 3x3 512x8x8 51 vs 87, 512x10x10 103 vs 97,
# 384x12x12 101 vs 79; 5x5 512x10x10 194 vs 185, 384x12x12 197 vs 155; 7x7 256x12x12 199 vs 198.
# At stride 2 (3x3 only: two loads and a shuffle per tap column, which 5x5 layers pay more for
# than the blocked kernel does), µs, the kernel it replaced vs rows: 96x112x112 (polyphase) 1165
# vs 995, 144x56x56 466 vs 437, 64x112x112 884 vs 657, 192x28x28 (blocked) 185 vs 100, 240x28x28
# 214 vs 130; onto 7x7 576x14x14 92 vs 149, 5x5 240x28x28 286 vs 289, 672x14x14 156 vs 403.
ROWS_KERNELS = (3, 5, 7)
ROWS_MIN_WIDTH = 12
ROWS_S2_MIN_WIDTH = 14


def rows_wanted() -> bool:
    """Whether ``depthwise_rows`` takes the layers it fits: where the CPU runs 16-float vectors at
    full width (elsewhere unmeasured: 8-float masked stores, ``vmaskmovps``, are slow on AMD's
    cores)."""
    return host_full_width()


# Depthwise 3x3, 5x5 and 7x7, stride 1 or 2, undilated, run on channels-last blocks of 8
# planes (``depthwise_blocked``, ``dwblock``), except the 3x3 layers on planes of more than
# this many output pixels (14x14), where the flat NCHW kernels below win. One thread, batch
# 1, us, the kernel it replaced vs blocked (ONNX Runtime, one thread, same run):
# 5x5 1152x7x7 204 vs 83 (129), 672x14x14 s2 217 vs 61 (91), 672x14x14 291 vs 140 (238),
# 240x28x28 310 vs 171 (267), 144x56x56 s2 279 vs 167 (210), 96x112x112 s2 603 vs 491 (513)
# (zero-bordered phases of each plane); 7x7 768x7x7 247 vs 99 (182), 96x56x56 2286 vs 411
# (723) (channels-last with numpy's copies); 3x3 960x7x7 48 vs 32, 384x14x14 46 vs 40,
# 576x14x14 65 vs 68, 192x28x28 59 vs 73, 144x56x56 153 vs 204 (flat, stride 1); 576x14x14
# s2 74 vs 31, 192x28x28 s2 56 vs 45, 144x56x56 s2 102 vs 124 (phases, stride 2); rows kernel
# (other 3x3 padding, odd sides) 144x57x57 s2 261 vs 120, 32x112x112 unpadded 185 vs 189.
BLOCKED_3X3_MAX_PIXELS = 14 * 14
# Other depthwise kernels (dilated, unequal strides, other sizes) take the channels-last pass
# up to 64x64 outputs, the generic direct kernel above.
CHANNELS_LAST_PIXELS_OTHER = 4096


# 3x3, stride 1, padding 1 all round (plane in = plane out, at least 3x3): flat passes
# over the whole plane, NCHW, no copies (``depthwise3x3_same``). One thread, batch 2, us,
# the rows kernel it replaced (or channels-last pass, with its two transposing copies) vs
# flat: 960x7x7 301 (cl 158) vs 69, 576x14x14 411 (cl 328) vs 114, 384x14x14 274 vs 74,
# 192x28x28 295 vs 129, 144x56x56 666 vs 373, 32x112x112 439 vs 295.
SAME_MIN_SIDE = 3
# 3x3, stride 2, padding 1 top and left, even input sides: the four phases of each plane,
# then flat passes (``depthwise3x3_s2``), up to this many output pixels (128x128: the
# per-thread phase scratch stays at 256 KB). Split by vector shuffles
# (``_simd.split_pairs``), one thread, us: rows kernel 417 vs polyphase 301 on 96x112x112,
# 227 vs 121 on 144x56x56.
S2_MAX_PIXELS = 128 * 128


def depthwise_algorithm(out_hw, kernel, stride, dilation, padding=None, in_hw=None) -> str:
    """``depthwise_rows``, ``depthwise3x3_same``, ``depthwise3x3_s2``, ``depthwise_blocked``,
    ``depthwise_cl`` or ``grouped`` (the generic direct kernel) for a depthwise convolution (one
    input channel per output channel); ``padding`` (top, left, bottom, right) and ``in_hw``, when
    given, admit the first four."""
    pixels = out_hw[0] * out_hw[1]
    square = kernel[0] == kernel[1]
    if padding is not None and square and tuple(dilation) == (1, 1) and min(padding) >= 0 and rows_wanted():
        if tuple(stride) == (1, 1) and kernel[0] in ROWS_KERNELS and out_hw[1] >= ROWS_MIN_WIDTH:
            return "depthwise_rows"
        if tuple(stride) == (2, 2) and kernel[0] == 3 and out_hw[1] >= ROWS_S2_MIN_WIDTH:
            return "depthwise_rows"
    blocked = (padding is not None and square and kernel[0] in (3, 5, 7) and tuple(dilation) == (1, 1)
               and stride[0] == stride[1] and stride[0] in (1, 2) and min(padding[:2]) >= 0)
    if blocked and (kernel[0] != 3 or pixels <= BLOCKED_3X3_MAX_PIXELS):
        return "depthwise_blocked"
    three = tuple(kernel) == (3, 3) and tuple(dilation) == (1, 1) and padding is not None
    if (three and tuple(stride) == (1, 1) and tuple(padding) == (1, 1, 1, 1)
            and min(out_hw) >= SAME_MIN_SIDE):
        return "depthwise3x3_same"
    if (three and in_hw is not None and tuple(stride) == (2, 2) and tuple(padding[:2]) == (1, 1)
            and in_hw[0] % 2 == 0 and in_hw[1] % 2 == 0 and tuple(out_hw) == (in_hw[0] // 2, in_hw[1] // 2)
            and min(out_hw) >= 2 and pixels <= S2_MAX_PIXELS):
        return "depthwise3x3_s2"
    if blocked:
        return "depthwise_blocked"
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
