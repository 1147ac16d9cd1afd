"""ResNet-18 and ResNet-50 with torchvision's layout and parameter names."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..tracing import ops
from ..nn.init import kaiming_normal_fan_out


def randomize_batch_norms(model: nn.Module, rng: np.random.Generator) -> None:
    """Random batch-norm statistics and affine parameters (positive variances)."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.data = rng.normal(0.0, 0.1, n).astype(np.float32)
            module.running_var.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
            if module.weight is not None and module.bias is not None:
                module.weight.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
                module.bias.data = rng.normal(0.0, 0.1, n).astype(np.float32)


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


class Bottleneck(nn.Module):
    """ResNet bottleneck: 1x1 reduce, 3x3 (with the stride), 1x1 expand x4, shortcut."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Any) -> Any:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout and parameter names, with basic or bottleneck blocks."""

    def __init__(self, layers: tuple[int, int, int, int], num_classes: int = 1000,
                 block: type = BasicBlock, width: int = 64) -> None:
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = ops.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _build(layers: tuple[int, int, int, int], block: type, num_classes: int, seed: int, width: int) -> ResNet:
    with nn.init_seed(seed) as rng:
        model = ResNet(layers, num_classes, block, width)
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                module.weight.data = kaiming_normal_fan_out(module.weight.shape, rng)
        randomize_batch_norms(model, rng)
    return model


def resnet18(num_classes: int = 1000, seed: int = 0, *, layers: tuple[int, int, int, int] = (2, 2, 2, 2),
             width: int = 64) -> ResNet:
    """ResNet-18 (torchvision's architecture and names), input [1, 3, 224, 224].

    Convolutions use torchvision's init (Kaiming normal, fan-out); batch-norm statistics and
    affine parameters are random so that inference exercises them. ``layers`` and ``width``
    shrink it for quick tests.
    """
    return _build(tuple(layers), BasicBlock, num_classes, seed, width)


def resnet50(num_classes: int = 1000, seed: int = 0, *, layers: tuple[int, int, int, int] = (3, 4, 6, 3),
             width: int = 64) -> ResNet:
    """ResNet-50 (bottleneck blocks, torchvision's names), input [1, 3, 224, 224]."""
    return _build(tuple(layers), Bottleneck, num_classes, seed, width)
