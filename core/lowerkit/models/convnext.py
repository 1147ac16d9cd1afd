"""ConvNeXt: 7x7 depthwise conv, channels-last layer norm, inverted MLP with GELU, layer scale."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..tracing import ops
from ._common import initialize


class LayerNorm2d(nn.Module):
    """Layer norm over the channels of [N, C, H, W] (permute to channels-last and back)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: Any) -> Any:
        return ops.permute(self.norm(ops.permute(x, (0, 2, 3, 1))), (0, 3, 1, 2))


class CNBlock(nn.Module):
    """x + gamma * pw2(gelu(pw1(norm(dwconv(x))))), the MLP channels-last."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(np.full(dim, 1e-6, dtype=np.float32))

    def forward(self, x: Any) -> Any:
        y = ops.permute(self.dwconv(x), (0, 2, 3, 1))
        y = self.pwconv2(ops.gelu(self.pwconv1(self.norm(y))))
        y = ops.mul(y, self.gamma)
        return x + ops.permute(y, (0, 3, 1, 2))


class ConvNeXt(nn.Module):
    def __init__(self, depths: tuple[int, ...], dims: tuple[int, ...], num_classes: int = 1000) -> None:
        super().__init__()
        downsample = [nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))]
        for i in range(len(dims) - 1):
            downsample.append(nn.Sequential(LayerNorm2d(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2)))
        self.downsample_layers = nn.Sequential(*downsample)
        self.stages = nn.Sequential(*[nn.Sequential(*[CNBlock(d) for _ in range(n)]) for n, d in zip(depths, dims)])
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: Any) -> Any:
        for down, stage in zip(self.downsample_layers, self.stages):
            x = stage(down(x))
        return self.head(self.norm(ops.flatten(ops.global_avg_pool2d(x), 1)))


def convnext_tiny(num_classes: int = 1000, seed: int = 0, *, depths: tuple[int, ...] = (3, 3, 9, 3),
                  dims: tuple[int, ...] = (96, 192, 384, 768)) -> ConvNeXt:
    """ConvNeXt-T (depths 3-3-9-3, dims 96-768), input [1, 3, 224, 224].

    Layer scales are random in [0.1, 0.5] rather than 1e-6 so that every block matters.
    """
    with nn.init_seed(seed) as rng:
        model = ConvNeXt(tuple(depths), tuple(dims), num_classes)
        initialize(model, rng)
        for module in model.modules():
            if isinstance(module, CNBlock):
                module.gamma.data = rng.uniform(0.1, 0.5, module.gamma.data.shape).astype(np.float32)
    return model
