"""ShuffleNetV2: channel split, two branches, concatenation and channel shuffle."""

from __future__ import annotations

from typing import Any

from .. import nn
from ..tracing import ops
from ._common import global_pool_flatten, initialize, repeats


def channel_shuffle(x: Any, groups: int) -> Any:
    """[N, C, H, W] -> interleave the ``groups`` channel groups (reshape, transpose, reshape)."""
    n, c, h, w = x.shape
    x = ops.reshape(x, (n, groups, c // groups, h, w))
    return ops.reshape(ops.transpose(x, 1, 2), (n, c, h, w))


def _branch(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, stride=stride, padding=1, groups=cout, bias=False), nn.BatchNorm2d(cout),
        nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class ShuffleBlock(nn.Module):
    """Stride 1: split channels in half, transform one half. Stride 2: two downsampling branches."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
            )
        self.branch2 = _branch(cin if stride > 1 else half, half, stride)

    def forward(self, x: Any) -> Any:
        if self.stride == 1:
            x1, x2 = ops.split(x, x.shape[1] // 2, dim=1)
            out = ops.concat([x1, self.branch2(x2)], 1)
        else:
            out = ops.concat([self.branch1(x), self.branch2(x)], 1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats_per_stage: tuple[int, int, int], channels: tuple[int, int, int, int, int],
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, stride=2, padding=1, bias=False),
                                   nn.BatchNorm2d(channels[0]), nn.ReLU())
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = channels[0]
        for index, (n, cout) in enumerate(zip(repeats_per_stage, channels[1:4])):
            blocks = [ShuffleBlock(cin, cout, 2)] + [ShuffleBlock(cout, cout, 1) for _ in range(n - 1)]
            setattr(self, f"stage{index + 2}", nn.Sequential(*blocks))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[4], 1, bias=False), nn.BatchNorm2d(channels[4]),
                                   nn.ReLU())
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x: Any) -> Any:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(global_pool_flatten(x))


def shufflenet_v2(num_classes: int = 1000, seed: int = 0, *,
                  channels: tuple[int, int, int, int, int] = (24, 116, 232, 464, 1024),
                  depth_mult: float = 1.0) -> ShuffleNetV2:
    """ShuffleNetV2 x1.0 (torchvision's layout), input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = ShuffleNetV2(tuple(repeats(n, depth_mult) for n in (4, 8, 4)), tuple(channels), num_classes)
        initialize(model, rng)
    return model
