"""Small real lowerkit files, the seeds of the fuzz corpus (and of the payload targets).

Every seed is a few KB: a module with convolutions (one grouped and dilated, one 3x3
stride-1 that glow_like runs with Winograd), pooling, a linear layer and a softmax, saved
plain, lowered to each backend and partitioned.
"""

from __future__ import annotations

import warnings

import numpy as np

import lowerkit
from lowerkit import nn, ops


class SeedNet(nn.Module):
    """conv -> relu -> max_pool -> dilated grouped conv -> linear -> softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.grouped = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = ops.max_pool2d(ops.relu(self.conv(x)), 2)
        x = ops.relu(self.grouped(x))
        return ops.softmax(self.fc(ops.flatten(x, 1)), dim=-1)


class DenseNet(nn.Module):
    """What nnpack runs whole: conv (3x3, stride 1) -> relu -> max_pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return ops.max_pool2d(ops.relu(self.conv(x)), 2)


class Classifier(nn.Module):
    """linear -> softmax over [N, features]."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return ops.softmax(self.fc(x), dim=-1)


def example_input() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)


def seed_files() -> dict[str, bytes]:
    """name -> file bytes; the names say which target each seeds."""
    x = example_input()
    seed_net = lowerkit.trace(SeedNet(), x)
    dense = lowerkit.trace(DenseNet(), x)
    classifier = lowerkit.trace(Classifier(), np.ones((2, 8), np.float32))
    files = {"container-module": lowerkit.dumps(seed_net)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files["container-reference"] = lowerkit.dumps(lowerkit.to_backend(seed_net, "reference"))
        files["glow_like-o2"] = lowerkit.dumps(
            lowerkit.to_backend(seed_net, "glow_like", {"forward": {"opt_level": 2}})
        )
        files["glow_like-dense"] = lowerkit.dumps(lowerkit.to_backend(dense, "glow_like"))
        files["nnpack-dense"] = lowerkit.dumps(lowerkit.to_backend(dense, "nnpack"))
        files["nnpack-classifier"] = lowerkit.dumps(
            lowerkit.to_backend(classifier, "nnpack", {"forward": {"threads": 1}})
        )
        files["container-partitioned"] = lowerkit.dumps(
            lowerkit.to_backend(seed_net, ["nnpack", "glow_like", "reference"])
        )
    return files
