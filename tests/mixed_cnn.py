"""A small CNN that partitions over several backends, for the tests of multi-backend files.

The quick start's SmallCNN runs whole on nnpack (nnpack claims every op of it, flatten
included); this one also average-pools, which nnpack declines (NNPACK has no average
pooling), and adds that to the max-pooled map, so ``[nnpack, glow_like, reference]`` gives
three regions: nnpack (convolution, ReLU, max pooling), glow_like (average pooling), nnpack
(the add, which continues from the max pooling, flatten, linear).
"""

from __future__ import annotations

import pytest

from lowerkit import nn, ops
from lowerkit.models.resnet import randomize_batch_norms
from lowerkit.models.small import SmallCNN


class MixedCNN(SmallCNN):
    """SmallCNN's layers, the sum of average and max pooling (input [N, 3, 8, 8])."""

    def forward(self, x):
        x = ops.relu(self.bn(self.conv(x)))
        x = ops.avg_pool2d(x, 2) + ops.max_pool2d(x, 2)
        return self.fc(ops.flatten(x, 1))


@pytest.fixture
def small_regions(monkeypatch):
    """The model's regions do a few thousand multiply-adds: nnpack keeps them beside another
    backend only without its bound on a region's work (``lowerkit_nnpack.context``), which
    this turns off for the test and the ``lowerkit`` commands it runs."""
    monkeypatch.setenv("LOWERKIT_NNPACK_REGION_MACS", "0")


def mixed_cnn(seed: int = 0) -> MixedCNN:
    """The model, its batch norms with random statistics; input ``models.example_input("small_cnn")``."""
    with nn.init_seed(seed) as rng:
        model = MixedCNN()
        randomize_batch_norms(model, rng)
    return model
