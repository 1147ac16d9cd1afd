"""A small CNN that partitions over several backends, for the tests of multi-backend files.

The quick start's SmallCNN runs whole on nnpack (nnpack claims every op of it, flatten
included); this one average-pools instead of max-pooling, which nnpack declines (NNPACK has
no average pooling), so ``[nnpack, glow_like, reference]`` gives three regions: nnpack
(convolution, ReLU), glow_like (average pooling), nnpack (flatten, linear).
"""

from __future__ import annotations

from lowerkit import nn, ops


class MixedCNN(nn.Module):
    """conv 3->16 3x3 pad 1, batch norm, relu, average pool 2, flatten, linear 256->10 (8x8 input)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = ops.avg_pool2d(ops.relu(self.bn(self.conv(x))), 2)
        return self.fc(ops.flatten(x, 1))


def mixed_cnn(seed: int = 0) -> MixedCNN:
    """The model, its batch norms with random statistics; input ``models.example_input("small_cnn")``."""
    from lowerkit.models.resnet import randomize_batch_norms

    with nn.init_seed(seed) as rng:
        model = MixedCNN()
        randomize_batch_norms(model, rng)
    return model

