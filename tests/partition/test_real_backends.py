"""ResNet-18 over the shipped backends, in priority order."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models

pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("lowerkit_glow_like")


@pytest.fixture(scope="module")
def resnet():
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    module = lk.trace(models.resnet18(num_classes=100), x)
    return module, x, module(x)


@pytest.mark.parametrize("backends", [["nnpack", "glow_like", "reference"], ["nnpack", "reference"]])
def test_resnet18_matches_reference_before_and_after_save_load(resnet, backends, tmp_path):
    module, x, expected = resnet
    lowered = lk.to_backend(module, backends)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * scale)
    lk.save(lowered, tmp_path / "r.lkm")
    loaded = lk.load(tmp_path / "r.lkm")
    np.testing.assert_array_equal(loaded(x), lowered(x))
    report = loaded.partition_report()
    # Batch norms were folded into the convolutions before partitioning; nnpack runs the
    # global pooling (its squeeze-excitation extension) and the flatten (a view) too, so the
    # whole network is one nnpack region.
    assert "fold_batch_norm" in report.passes
    assert not any(n.op == "batch_norm" for n in report.nodes)
    assert next(n for n in report.nodes if n.op == "global_avg_pool2d").backend == "nnpack"
    flatten = next(n for n in report.nodes if n.op in ("flatten", "reshape"))
    assert flatten.backend == "nnpack" and not flatten.declines
    convs = [n for n in report.nodes if n.op == "conv2d"]
    assert len(convs) == 20
    # At 32x32 the last stage's planes are 1x1: nnpack takes those convolutions too (once it
    # left them to the next backend; since it runs squeeze-excitation blocks, it keeps them).
    assert all(n.backend == "nnpack" for n in convs)
