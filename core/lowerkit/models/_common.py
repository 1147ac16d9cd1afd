"""Pieces the zoo's networks share: conv-bn-activation, squeeze-excitation, initialisation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import nn
from ..tracing import ops
from ..nn.init import kaiming_normal_fan_out


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round a channel count to a multiple of ``divisor``, never below 90% of ``value``."""
    min_value = min_value or divisor
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def repeats(n: int, depth_mult: float) -> int:
    """How many times a stage's block repeats at ``depth_mult`` (at least once)."""
    return max(1, int(math.ceil(n * depth_mult)))


def activate(kind: str | None, x: Any) -> Any:
    """Apply the activation named ``kind`` (``None``: identity)."""
    if kind is None:
        return x
    if kind == "relu":
        return ops.relu(x)
    if kind == "relu6":
        return ops.relu6(x)
    if kind == "sigmoid":
        return ops.sigmoid(x)
    return getattr(ops, kind)(x)  # hardswish, hardsigmoid, silu, gelu


class Activation(nn.Module):
    """An activation layer by name: relu, relu6, sigmoid, hardswish, hardsigmoid, silu, gelu."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: Any) -> Any:
        return activate(self.kind, x)

    def extra_repr(self) -> str:
        return self.kind


class ConvBNAct(nn.Sequential):
    """conv (no bias, "same" padding) -> batch norm -> activation (``act=None``: none)."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                 act: str | None = "relu") -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act is not None:
            layers.append(Activation(act))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """x * gate(fc2(act(fc1(mean over H, W of x)))): channel attention with 1x1 convs."""

    def __init__(self, channels: int, squeeze: int, act: str = "relu", gate: str = "hardsigmoid") -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act, gate

    def forward(self, x: Any) -> Any:
        s = ops.global_avg_pool2d(x)
        s = activate(self.gate, self.fc2(activate(self.act, self.fc1(s))))
        return x * s


def initialize(model: nn.Module, rng: np.random.Generator) -> None:
    """torchvision-style conv init (Kaiming normal, fan-out) and random normalisation statistics.

    Batch-norm means ~ N(0, 0.1), variances ~ U(0.5, 1.5), affine weights ~ U(0.5, 1.5),
    biases ~ N(0, 0.1); layer norms get the same affine parameters. Random statistics make a
    test see a wrong epsilon, a swapped mean/variance or a dropped norm.
    """
    layer_norm = getattr(nn, "LayerNorm", None)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            module.weight.data = kaiming_normal_fan_out(module.weight.shape, rng)
        elif isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            module.running_mean.data = rng.normal(0.0, 0.1, n).astype(np.float32)
            module.running_var.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
            if module.weight is not None and module.bias is not None:
                module.weight.data = rng.uniform(0.5, 1.5, n).astype(np.float32)
                module.bias.data = rng.normal(0.0, 0.1, n).astype(np.float32)
        elif layer_norm is not None and isinstance(module, layer_norm):
            for name, param in module.named_parameters(recurse=False):
                shape = param.data.shape
                if name == "weight":
                    param.data = rng.uniform(0.5, 1.5, shape).astype(np.float32)
                elif name == "bias":
                    param.data = rng.normal(0.0, 0.1, shape).astype(np.float32)


def global_pool_flatten(x: Any) -> Any:
    """[N, C, H, W] -> [N, C] by averaging over H and W."""
    return ops.flatten(ops.global_avg_pool2d(x), 1)
