from __future__ import annotations

import pytest

from lowerkit_nnpack.geometry import ConvGeometry
from lowerkit_nnpack.selection import select_algorithm


@pytest.mark.parametrize(
    "kernel,stride,hw,expected",
    [
        ((1, 1), (1, 1), (56, 56), "direct"),
        ((1, 1), (2, 2), (56, 56), "direct"),
        ((3, 3), (1, 1), (56, 56), "wt8x8"),
        ((3, 3), (2, 2), (56, 56), "implicit_gemm"),
        ((5, 5), (1, 1), (12, 12), "ft8x8"),
        ((8, 8), (1, 1), (200, 200), "ft16x16"),  # 8x8 tiles would need > 4x the 16x16 tile count
        ((11, 11), (1, 1), (30, 30), "ft16x16"),
        ((1, 7), (1, 1), (30, 30), "implicit_gemm"),
        ((16, 16), (1, 1), (40, 40), "ft16x16"),
    ],
)
def test_nnpack_selection_rules(kernel, stride, hw, expected):
    assert select_algorithm(ConvGeometry(4, 4, hw, kernel, stride)) == expected
