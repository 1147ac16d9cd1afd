from __future__ import annotations

import pytest

from lowerkit_nnpack.geometry import ConvGeometry, GeometryError


def test_output_size_and_flops():
    g = ConvGeometry(64, 128, (56, 56), (3, 3), (2, 2), (1, 1, 0, 0))
    assert g.out_hw == (28, 28)
    assert g.flops(2) == 2 * 2 * 128 * 28 * 28 * 64 * 9


@pytest.mark.parametrize(
    "geom,message",
    [
        (ConvGeometry(0, 1, (4, 4), (3, 3)), "channel counts must be >= 1, got input_channels=0"),
        (ConvGeometry(1, 1, (4, 4), (3, 3), padding=(0, 0, 3, 0)), r"bottom padding must be in \[0, kernel size - 1\] = \[0, 2\], got 3"),
        (ConvGeometry(1, 1, (4, 4), (3, 3), stride=(0, 1)), "stride must be >= 1, got 0x1"),
        (ConvGeometry(1, 1, (2, 2), (3, 3)), "padded input 2x2 is smaller than the kernel 3x3"),
    ],
)
def test_invalid_geometry_messages(geom, message):
    with pytest.raises(GeometryError, match=message):
        geom.check()
