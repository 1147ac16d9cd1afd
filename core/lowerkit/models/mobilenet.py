"""MobileNetV2 and MobileNetV3 (small and large), torchvision's layouts and parameter names."""

from __future__ import annotations

from typing import Any

from .. import nn
from ._common import Activation, ConvBNAct, SqueezeExcitation, global_pool_flatten, initialize, make_divisible, repeats

# MobileNetV2: expansion t, output channels c, repeats n, first stride s.
_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
               (6, 320, 1, 1))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand (relu6), 3x3 depthwise (relu6), 1x1 project, residual."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNAct(cin, hidden, 1, act="relu6"))
        layers += [
            ConvBNAct(hidden, hidden, 3, stride, groups=hidden, act="relu6"),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        y = self.conv(x)
        return x + y if self.use_res_connect else y


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, depth_mult: float = 1.0) -> None:
        super().__init__()
        cin = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act="relu6")]
        for t, c, n, s in _V2_SETTING:
            cout = make_divisible(c * width_mult)
            for i in range(repeats(n, depth_mult)):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNAct(cin, last, 1, act="relu6"))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: Any) -> Any:
        return self.classifier(global_pool_flatten(self.features(x)))


# MobileNetV3 blocks: kernel, expanded channels, output channels, squeeze-excite, activation, stride.
_V3_LARGE = (
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
    (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
    (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
    (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
    (5, 960, 160, True, "hardswish", 1),
)
_V3_SMALL = (
    (3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1), (5, 240, 40, True, "hardswish", 1),
    (5, 120, 48, True, "hardswish", 1), (5, 144, 48, True, "hardswish", 1),
    (5, 288, 96, True, "hardswish", 2), (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1),
)


class V3Block(nn.Module):
    """MobileNetV3 block: 1x1 expand, kxk depthwise, optional squeeze-excite, 1x1 project, residual."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNAct(cin, expanded, 1, act=act))
        layers.append(ConvBNAct(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se:
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4, 8)))
        layers.append(ConvBNAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        y = self.block(x)
        return x + y if self.use_res_connect else y


class MobileNetV3(nn.Module):
    def __init__(self, setting: tuple, last_channel: int, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()
        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        cin = ch(16)
        layers: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act="hardswish")]
        for kernel, expanded, cout, se, act, stride in setting:
            layers.append(V3Block(cin, kernel, ch(expanded), ch(cout), se, act, stride))
            cin = ch(cout)
        layers.append(ConvBNAct(cin, 6 * cin, 1, act="hardswish"))
        self.features = nn.Sequential(*layers)
        last = make_divisible(last_channel * width_mult, 8)
        self.classifier = nn.Sequential(
            nn.Linear(6 * cin, last), Activation("hardswish"), nn.Dropout(0.2), nn.Linear(last, num_classes)
        )

    def forward(self, x: Any) -> Any:
        return self.classifier(global_pool_flatten(self.features(x)))


def mobilenet_v2(num_classes: int = 1000, seed: int = 0, *, width_mult: float = 1.0,
                 depth_mult: float = 1.0) -> MobileNetV2:
    """MobileNetV2 (torchvision's layout), input [1, 3, 224, 224]; ``depth_mult`` < 1 repeats fewer blocks."""
    with nn.init_seed(seed) as rng:
        model = MobileNetV2(num_classes, width_mult, depth_mult)
        initialize(model, rng)
    return model


def mobilenet_v3_large(num_classes: int = 1000, seed: int = 0, *, width_mult: float = 1.0) -> MobileNetV3:
    """MobileNetV3-Large (hardswish, squeeze-excite with hardsigmoid), input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = MobileNetV3(_V3_LARGE, 1280, num_classes, width_mult)
        initialize(model, rng)
    return model


def mobilenet_v3_small(num_classes: int = 1000, seed: int = 0, *, width_mult: float = 1.0) -> MobileNetV3:
    """MobileNetV3-Small, input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = MobileNetV3(_V3_SMALL, 1024, num_classes, width_mult)
        initialize(model, rng)
    return model
