from __future__ import annotations

import pytest

from lowerkit_nnpack.geometry import ConvGeometry
from lowerkit_nnpack.selection import nnpack_rules, select_algorithm


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
def test_nnpack_published_rules(kernel, stride, hw, expected):
    assert nnpack_rules(ConvGeometry(4, 4, hw, kernel, stride)) == expected


@pytest.mark.parametrize(
    "kernel,stride,hw,batch,expected",
    [
        ((1, 1), (2, 2), (56, 56), 1, "direct"),
        ((3, 3), (1, 1), (56, 56), 1, "wt6x6"),
        ((3, 3), (1, 1), (14, 14), 1, "wt6x6"),  # per-image path: 16 tiles, the kernel is read once per call
        ((3, 3), (1, 1), (7, 7), 1, "implicit_gemm"),  # 4 tiles: a tie, the baseline's algorithm stays
        ((3, 3), (1, 1), (14, 14), 8, "wt6x6"),  # 64 4x4 tiles per worker
        ((3, 3), (2, 2), (56, 56), 8, "implicit_gemm"),
        ((5, 5), (1, 1), (13, 13), 1, "implicit_gemm"),
        ((7, 7), (1, 1), (28, 28), 1, "ft16x16"),
        ((5, 5), (1, 1), (12, 12), 64, "ft16x16"),
        ((2, 2), (1, 1), (12, 12), 64, "implicit_gemm"),  # 64 tiles x area 4 < 400
        ((1, 7), (1, 1), (30, 30), 8, "implicit_gemm"),
    ],
)
def test_measured_policy(kernel, stride, hw, batch, expected):
    pad = (kernel[0] // 2, kernel[1] // 2) * 2
    assert select_algorithm(ConvGeometry(64, 64, hw, kernel, stride, pad), batch) == expected


def test_winograd_takes_layers_of_at_least_32_input_channels():
    """Its transforms cost per channel what its GEMMs save per pair of channels: a stem of three
    channels, or a narrow layer, stays on implicit GEMM however many tiles it has."""
    from lowerkit_nnpack.selection import WINOGRAD_MIN_INPUTS

    assert WINOGRAD_MIN_INPUTS == 32
    for c, expected in ((3, "implicit_gemm"), (31, "implicit_gemm"), (32, "wt6x6")):
        geom = ConvGeometry(c, 64, (256, 256), (3, 3), (1, 1), (1, 1, 1, 1))
        assert select_algorithm(geom, batch=1) == expected
        assert select_algorithm(geom, batch=8, workers=2) == expected
        assert select_algorithm(geom, batch=1, team=True) == expected


def test_batched_path_counts_one_workers_share_of_the_batch():
    geom = ConvGeometry(64, 64, (10, 10), (3, 3), (1, 1), (1, 1, 1, 1))  # 9 4x4 tiles per image
    assert select_algorithm(geom, batch=4, workers=1) == "wt6x6"  # one worker: the kernel is read once
    assert select_algorithm(geom, batch=4, workers=2, batch_threshold=2) == "implicit_gemm"  # 18 per worker
    assert select_algorithm(geom, batch=6, workers=2, batch_threshold=2) == "wt6x6"  # 27 per worker
    assert select_algorithm(geom, batch=4, workers=2, batch_threshold=8) == "wt6x6"  # per-image path
    resnet_conv5 = ConvGeometry(512, 512, (7, 7), (3, 3), (1, 1), (1, 1, 1, 1))  # 4 tiles per image
    assert select_algorithm(resnet_conv5, batch=8, workers=2) == "implicit_gemm"  # 16 per worker
    assert select_algorithm(resnet_conv5, batch=4, workers=2, batch_threshold=8) == "wt6x6"  # per-image, 16 tiles


def test_team_plans_take_winograd_from_32_tiles_over_the_batch(monkeypatch):
    """One image on every core: with full-width AVX-512, wt6x6 lost to implicit GEMM at 16
    tiles (14x14, batch 1); elsewhere layers of at most 256 x 256 channels take it from 16
    (``team_layers.winograd_tiles``), wider ones still from 32."""
    from lowerkit.backend.cpu import panels
    from lowerkit_nnpack.selection import TEAM_WINOGRAD_MIN_TILES

    assert TEAM_WINOGRAD_MIN_TILES == 32
    g14, g28 = ConvGeometry(64, 64, (14, 14), (3, 3), (1, 1), (1, 1, 1, 1)), ConvGeometry(64, 64, (28, 28), (3, 3), (1, 1), (1, 1, 1, 1))
    wide7 = ConvGeometry(512, 512, (7, 7), (3, 3), (1, 1), (1, 1, 1, 1))  # 4 tiles an image
    assert select_algorithm(g14, batch=1) == "wt6x6"  # the per-image rule: 16 tiles
    assert select_algorithm(g14, batch=1, team=True) == "wt6x6"  # (tests pin the AVX2 rules)
    assert select_algorithm(wide7, batch=4, team=True) == "implicit_gemm"  # 16 tiles, 512 x 512 channels
    assert select_algorithm(wide7, batch=8, team=True) == "wt6x6"  # 32 tiles
    monkeypatch.setattr(panels, "_RULES", ["avx512"])
    assert select_algorithm(g14, batch=1, team=True) == "implicit_gemm"
    assert select_algorithm(g14, batch=2, team=True) == "wt6x6"  # 32 tiles
    assert select_algorithm(g28, batch=1, team=True) == "wt6x6"  # 49
