"""The small CNN of the quick start."""

from __future__ import annotations

from typing import Any

from .. import nn
from ..tracing import ops
from .resnet import randomize_batch_norms


class SmallCNN(nn.Module):
    """conv 3->16 3x3 pad 1, batch norm, relu, max pool 2, flatten, linear 256->10 (8x8 input)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: Any) -> Any:
        x = ops.max_pool2d(ops.relu(self.bn(self.conv(x))), 2)
        return self.fc(ops.flatten(x, 1))


def small_cnn(seed: int = 0) -> SmallCNN:
    """The small CNN of the quick start, input [1, 3, 8, 8], 10 outputs."""
    with nn.init_seed(seed) as rng:
        model = SmallCNN()
        randomize_batch_norms(model, rng)
    return model
