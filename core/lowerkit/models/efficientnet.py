"""EfficientNet-B0: MBConv blocks with SiLU and squeeze-excitation."""

from __future__ import annotations

from typing import Any

from .. import nn
from ._common import ConvBNAct, SqueezeExcitation, global_pool_flatten, initialize, make_divisible, repeats

# expansion, kernel, first stride, output channels, repeats (B0)
_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
       (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


class MBConv(nn.Module):
    """1x1 expand (SiLU), kxk depthwise (SiLU), squeeze-excite (SiLU, sigmoid gate), 1x1 project."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNAct(cin, hidden, 1, act="silu"))
        layers += [
            ConvBNAct(hidden, hidden, kernel, stride, groups=hidden, act="silu"),
            SqueezeExcitation(hidden, max(1, cin // 4), act="silu", gate="sigmoid"),
            ConvBNAct(hidden, cout, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        y = self.block(x)
        return x + y if self.use_res_connect else y


class EfficientNet(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, depth_mult: float = 1.0) -> None:
        super().__init__()
        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        cin = ch(32)
        layers: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act="silu")]
        for expand, kernel, stride, c, n in _B0:
            stage = []
            for i in range(repeats(n, depth_mult)):
                stage.append(MBConv(cin, ch(c), kernel, stride if i == 0 else 1, expand))
                cin = ch(c)
            layers.append(nn.Sequential(*stage))
        head = ch(1280) if width_mult > 1 else 1280
        layers.append(ConvBNAct(cin, head, 1, act="silu"))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head, num_classes))

    def forward(self, x: Any) -> Any:
        return self.classifier(global_pool_flatten(self.features(x)))


def efficientnet_b0(num_classes: int = 1000, seed: int = 0, *, width_mult: float = 1.0,
                    depth_mult: float = 1.0) -> EfficientNet:
    """EfficientNet-B0 (torchvision's layout), input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = EfficientNet(num_classes, width_mult, depth_mult)
        initialize(model, rng)
    return model
