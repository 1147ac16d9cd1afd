"""A MixNet-style network: depthwise convolutions with mixed kernel sizes per channel group."""

from __future__ import annotations

from typing import Any

from .. import nn
from ..tracing import ops
from ._common import ConvBNAct, SqueezeExcitation, activate, global_pool_flatten, initialize, make_divisible

# input channels, output channels, depthwise kernels, stride, expansion, activation, squeeze-excite
_MIXNET_S = (
    (16, 16, (3,), 1, 1, "relu", False), (16, 24, (3,), 2, 6, "relu", False), (24, 24, (3,), 1, 3, "relu", False),
    (24, 40, (3, 5, 7), 2, 6, "silu", True), (40, 40, (3, 5), 1, 6, "silu", True),
    (40, 80, (3, 5, 7), 2, 6, "silu", True), (80, 80, (3, 5), 1, 6, "silu", True),
    (80, 120, (3, 5, 7), 1, 6, "silu", True), (120, 200, (3, 5, 7, 9), 2, 6, "silu", True),
    (200, 200, (3, 5, 7, 9), 1, 6, "silu", True),
)


def split_channels(channels: int, groups: int) -> list[int]:
    """``channels`` split in ``groups`` near-equal parts, the remainder to the first."""
    sizes = [channels // groups] * groups
    sizes[0] += channels - sum(sizes)
    return sizes


class MixedDepthwise(nn.Module):
    """Split channels into groups, a depthwise conv with its own kernel size per group, concat."""

    def __init__(self, channels: int, kernels: tuple[int, ...], stride: int) -> None:
        super().__init__()
        self.sizes = split_channels(channels, len(kernels))
        self.convs = nn.Sequential(*[
            nn.Conv2d(c, c, k, stride=stride, padding=k // 2, groups=c, bias=False)
            for c, k in zip(self.sizes, kernels)
        ])

    def forward(self, x: Any) -> Any:
        if len(self.sizes) == 1:
            return self.convs[0](x)
        parts = ops.split(x, self.sizes, dim=1)
        return ops.concat([conv(p) for conv, p in zip(self.convs, parts)], 1)


class MixBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernels: tuple[int, ...], stride: int, expand: int, act: str,
                 se: bool) -> None:
        super().__init__()
        hidden = cin * expand
        self.act = act
        self.use_res_connect = stride == 1 and cin == cout
        self.expand = ConvBNAct(cin, hidden, 1, act=act) if expand != 1 else None
        self.dw = MixedDepthwise(hidden, kernels, stride)
        self.bn = nn.BatchNorm2d(hidden)
        self.se = SqueezeExcitation(hidden, max(1, cin // 2), act=act, gate="sigmoid") if se else None
        self.project = ConvBNAct(hidden, cout, 1, act=None)

    def forward(self, x: Any) -> Any:
        y = self.expand(x) if self.expand is not None else x
        y = activate(self.act, self.bn(self.dw(y)))
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.use_res_connect else y


class MixNet(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, max_blocks: int | None = None) -> None:
        super().__init__()
        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        setting = _MIXNET_S if max_blocks is None else _MIXNET_S[:max_blocks]
        self.stem = ConvBNAct(3, ch(16), 3, 2, act="relu")
        self.blocks = nn.Sequential(*[
            MixBlock(ch(cin), ch(cout), kernels, stride, expand, act, se)
            for cin, cout, kernels, stride, expand, act, se in setting
        ])
        last = ch(setting[-1][1])
        self.head = ConvBNAct(last, 1536, 1, act="relu")
        self.classifier = nn.Linear(1536, num_classes)

    def forward(self, x: Any) -> Any:
        return self.classifier(global_pool_flatten(self.head(self.blocks(self.stem(x)))))


def mixnet_s(num_classes: int = 1000, seed: int = 0, *, width_mult: float = 1.0,
             max_blocks: int | None = None) -> MixNet:
    """A MixNet-S-like network (mixed 3/5/7/9 depthwise kernels), input [1, 3, 224, 224].

    ``max_blocks`` keeps only the first blocks (for quick tests).
    """
    with nn.init_seed(seed) as rng:
        model = MixNet(num_classes, width_mult, max_blocks)
        initialize(model, rng)
    return model
