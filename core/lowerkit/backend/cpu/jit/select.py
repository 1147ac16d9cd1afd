"""Which compiled depthwise kernel fits a shape (plain Python: no numba)."""

from __future__ import annotations

# Depthwise planes of at most this many outputs (32x32) run channels-last: their rows are
# too short for the row kernels (measured: 28x28 0.29 vs 0.43 ms, 14x14 0.19 vs 0.65 ms,
# 56x56 1.17 vs 0.73 ms for channels-last vs rows, one thread).
CHANNELS_LAST_PIXELS = 1024


def depthwise_algorithm(out_hw, kernel, stride, dilation) -> str:
    """``depthwise_cl``, ``depthwise3x3`` or ``grouped`` (the generic direct kernel) for a
    depthwise convolution (one input channel per output channel)."""
    if out_hw[0] * out_hw[1] <= CHANNELS_LAST_PIXELS:
        return "depthwise_cl"
    if tuple(kernel) == (3, 3) and tuple(dilation) == (1, 1) and stride[0] == stride[1] and stride[0] in (1, 2):
        return "depthwise3x3"
    return "grouped"


def padded_hw(out_hw, kernel, stride, dilation) -> tuple[int, int]:
    """Rows and columns of the padded image a channels-last depthwise pass reads."""
    return tuple((o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(out_hw, kernel, stride, dilation))
