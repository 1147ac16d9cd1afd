"""Deterministic reference networks built from :mod:`lowerkit.nn`, for demos, tests and benchmarks.

Every builder takes ``seed=`` and returns the same weights for the same seed. Batch-norm
statistics and affine parameters are random (positive variances) so that they matter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import nn, ops
from .errors import InputError
from .nn.init import kaiming_normal_fan_out

__all__ = ["BasicBlock", "ResNet", "SmallCNN", "example_input", "resnet18", "small_cnn", "MODEL_INPUTS"]

# model name -> input shape at batch 1
MODEL_INPUTS: dict[str, tuple[int, ...]] = {
    "small_cnn": (1, 3, 8, 8),
    "resnet18": (1, 3, 224, 224),
}


def _randomize_batch_norms(model: nn.Module, rng: np.random.Generator) -> None:
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.data = rng.normal(0.0, 0.1, n).astype(np.float32)
            module.running_var.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
            if module.weight is not None and module.bias is not None:
                module.weight.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
                module.bias.data = rng.normal(0.0, 0.1, n).astype(np.float32)


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
        _randomize_batch_norms(model, rng)
    return model


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with batch norm, identity or 1x1 downsample shortcut."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Any) -> Any:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout and parameter names, with basic blocks."""

    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = ops.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000, seed: int = 0) -> ResNet:
    """ResNet-18 (torchvision's architecture and names), input [1, 3, 224, 224].

    Convolutions use torchvision's init (Kaiming normal, fan-out); batch-norm statistics and
    affine parameters are random so that inference exercises them.
    """
    with nn.init_seed(seed) as rng:
        model = ResNet((2, 2, 2, 2), num_classes)
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                module.weight.data = kaiming_normal_fan_out(module.weight.shape, rng)
        _randomize_batch_norms(model, rng)
    return model


def example_input(model_name: str, batch: int = 1, seed: int = 0) -> np.ndarray:
    """A float32 input of the model's shape with ``batch`` rows, uniform in [0, 1)."""
    if model_name not in MODEL_INPUTS:
        raise InputError(f"unknown model {model_name!r}; expected one of {sorted(MODEL_INPUTS)}")
    shape = (batch, *MODEL_INPUTS[model_name][1:])
    return np.random.default_rng(seed).random(shape, dtype=np.float32)
