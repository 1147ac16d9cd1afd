"""Whole models on glow_like against reference, before and after save/load."""

from __future__ import annotations

import pytest
from tests.glow_like.helpers import assert_close, reference, traced

import lowerkit as lk


@pytest.mark.parametrize("level", [0, 1, 2])
def test_small_cnn_matches_reference_at_each_opt_level(level):
    module, x = traced("small_cnn", batch=2)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"opt_level": level}})
    assert_close([lowered(x)], reference(module, x))


def test_resnet18_matches_reference_before_and_after_save_load(tmp_path):
    module, x = traced("resnet18", hw=64)
    expected = reference(module, x)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"opt_level": 2}})
    assert_close([lowered(x)], expected)
    path = tmp_path / "resnet18.lkm"
    lk.save(lowered, path)
    loaded = lk.load(path)
    assert loaded.backend == "glow_like"
    assert_close([loaded(x)], expected)


def test_resnet18_opt_levels_shrink_the_program():
    module, _ = traced("resnet18", hw=32)
    from lowerkit_glow_like._compiler import compile_method
    from lowerkit_glow_like._options import Options

    sizes = [len(compile_method(module, "forward", Options(opt_level=lv)).instructions) for lv in (0, 2)]
    assert sizes[1] < sizes[0] / 2  # batch norms folded, relus fused


def test_resnet18_batch_8_on_opt_level_0_matches_reference():
    module, x = traced("resnet18", batch=8, hw=32)
    lowered = lk.to_backend(module, "glow_like", {"forward": {"opt_level": 0}})
    assert_close([lowered(x)], reference(module, x))


def test_resnet18_full_size_opt2_matches_reference():
    module, x = traced("resnet18")  # 1 x 3 x 224 x 224
    from lowerkit_glow_like._compiler import compile_method
    from lowerkit_glow_like._options import Options

    program = compile_method(module, "forward", Options())
    # At batch 1 the 3x3 stride-1 convolutions of layer1 (4) and layer2 (3) have enough
    # tiles for Winograd, and layer3's (3; 16 tiles, 256 x 256 channels) under the AVX2 rules
    # the tests pin (team_layers.winograd_tiles); layer4 (4 tiles) stays im2col.
    assert sum(ins.attrs.get("algo") == "winograd" for ins in program.instructions) == 10
    lowered = lk.to_backend(module, "glow_like")
    assert_close([lowered(x)], reference(module, x))
