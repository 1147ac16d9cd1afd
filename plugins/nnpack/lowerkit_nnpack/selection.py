"""``auto``: NNPACK's published algorithm selection (nnp_convolution_inference)."""

from __future__ import annotations

from .geometry import ConvGeometry
from .tiles import tile_counts


def select_algorithm(geom: ConvGeometry) -> str:
    """The algorithm ``auto`` picks for ``geom``.

    NNPACK's rules: stride 1 -> 1x1 ``direct``, 3x3 ``wt8x8``, kernels from 2x2 up to 8x8
    ``ft8x8`` unless 8x8 tiles need more than 4x the tiles of 16x16 (then ``ft16x16``),
    up to 16x16 ``ft16x16``; everything else ``implicit_gemm``. NNPACK sends strided 1x1
    to implicit GEMM; ours goes to ``direct``, which handles a stride by slicing.
    """
    kh, kw = geom.kernel
    if (kh, kw) == (1, 1):
        return "direct"
    if geom.stride != (1, 1):
        return "implicit_gemm"
    if (kh, kw) == (3, 3):
        return "wt8x8"
    if min(kh, kw) >= 2 and max(kh, kw) <= 8:
        t8 = tile_counts(geom.out_hw, (8 - kh + 1, 8 - kw + 1))
        t16 = tile_counts(geom.out_hw, (16 - kh + 1, 16 - kw + 1))
        return "ft8x8" if t8[0] * t8[1] <= 4 * t16[0] * t16[1] else "ft16x16"
    if min(kh, kw) >= 2 and max(kh, kw) <= 16:
        return "ft16x16"
    return "implicit_gemm"
