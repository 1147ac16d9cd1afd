"""PyTorch twins of the zoo models, written from plain torch.nn (no torchvision, no timm).

Each twin has the zoo model's module tree, so its state dict has the same names and the zoo
model's weights load into it. They are the oracle of tests/models/test_zoo_models.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lowerkit.models import mixnet as lk_mixnet
from lowerkit.models import mobilenet as lk_mobilenet
from lowerkit.models._common import make_divisible, repeats
from tests.models.zoo_twins_transformers import ConvNeXt, Swin, ViT

ACTS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid,
        "silu": nn.SiLU, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}


def act(kind):
    return nn.Identity() if kind is None else ACTS[kind]()


def conv_bn_act(cin, cout, k=3, s=1, groups=1, a="relu"):
    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if a is not None:
        layers.append(act(a))
    return nn.Sequential(*layers)


def pool(x):
    return F.adaptive_avg_pool2d(x, 1).flatten(1)


class SE(nn.Module):
    def __init__(self, c, squeeze, a="relu", gate="hardsigmoid"):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.a, self.gate = act(a), act(gate)

    def forward(self, x):
        return x * self.gate(self.fc2(self.a(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


# -- small CNN and ResNets ---------------------------------------------------------------------
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Linear(256, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2), 1))


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1, down=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
        self.relu, self.downsample = nn.ReLU(), down

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottle(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1, down=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
        self.relu, self.downsample = nn.ReLU(), down

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu(self.bn2(self.conv2(out)))))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes, width):
        super().__init__()
        self.inplanes = width
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        self.relu, self.maxpool = nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        for i, n in enumerate(layers):
            setattr(self, f"layer{i + 1}", self._layer(block, width * 2**i, n, 1 if i == 0 else 2))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

    def _layer(self, block, planes, n, stride):
        down = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            down = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                 nn.BatchNorm2d(planes * block.expansion))
        blocks = [block(self.inplanes, planes, stride, down)]
        self.inplanes = planes * block.expansion
        return nn.Sequential(*blocks, *[block(self.inplanes, planes) for _ in range(1, n)])

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(pool(self.layer4(self.layer3(self.layer2(self.layer1(x))))))


# -- MobileNets, EfficientNet --------------------------------------------------------------------
class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, s, t):
        super().__init__()
        hidden = int(round(cin * t))
        self.res = s == 1 and cin == cout
        layers = [conv_bn_act(cin, hidden, 1, a="relu6")] if t != 1 else []
        layers += [conv_bn_act(hidden, hidden, 3, s, hidden, "relu6"), nn.Conv2d(hidden, cout, 1, bias=False),
                   nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, depth_mult=1.0):
        super().__init__()
        cin, last = make_divisible(32 * width_mult), make_divisible(1280 * max(1.0, width_mult))
        feats = [conv_bn_act(3, cin, 3, 2, a="relu6")]
        for t, c, n, s in lk_mobilenet._V2_SETTING:
            cout = make_divisible(c * width_mult)
            for i in range(repeats(n, depth_mult)):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats.append(conv_bn_act(cin, last, 1, a="relu6"))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(pool(self.features(x)))


class V3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, a, s):
        super().__init__()
        self.res = s == 1 and cin == cout
        layers = [conv_bn_act(cin, exp, 1, a=a)] if exp != cin else []
        layers.append(conv_bn_act(exp, exp, k, s, exp, a))
        if se:
            layers.append(SE(exp, make_divisible(exp // 4, 8)))
        layers.append(conv_bn_act(exp, cout, 1, a=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.res else self.block(x)


class MobileNetV3(nn.Module):
    def __init__(self, setting, last_channel, num_classes=1000, width_mult=1.0):
        super().__init__()
        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        cin = ch(16)
        layers = [conv_bn_act(3, cin, 3, 2, a="hardswish")]
        for k, e, c, se, a, s in setting:
            layers.append(V3Block(cin, k, ch(e), ch(c), se, a, s))
            cin = ch(c)
        layers.append(conv_bn_act(cin, 6 * cin, 1, a="hardswish"))
        self.features = nn.Sequential(*layers)
        last = make_divisible(last_channel * width_mult, 8)
        self.classifier = nn.Sequential(nn.Linear(6 * cin, last), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(pool(self.features(x)))


class MBConv(nn.Module):
    def __init__(self, cin, cout, k, s, e):
        super().__init__()
        hidden = cin * e
        self.res = s == 1 and cin == cout
        layers = [conv_bn_act(cin, hidden, 1, a="silu")] if e != 1 else []
        layers += [conv_bn_act(hidden, hidden, k, s, hidden, "silu"), SE(hidden, max(1, cin // 4), "silu", "sigmoid"),
                   conv_bn_act(hidden, cout, 1, a=None)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.res else self.block(x)


class EfficientNet(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, depth_mult=1.0):
        super().__init__()
        from lowerkit.models.efficientnet import _B0

        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        cin = ch(32)
        layers = [conv_bn_act(3, cin, 3, 2, a="silu")]
        for e, k, s, c, n in _B0:
            stage = []
            for i in range(repeats(n, depth_mult)):
                stage.append(MBConv(cin, ch(c), k, s if i == 0 else 1, e))
                cin = ch(c)
            layers.append(nn.Sequential(*stage))
        head = ch(1280) if width_mult > 1 else 1280
        layers.append(conv_bn_act(cin, head, 1, a="silu"))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(head, num_classes))

    def forward(self, x):
        return self.classifier(pool(self.features(x)))


# -- ShuffleNetV2, MixNet --------------------------------------------------------------------------
def shuffle(x, groups):
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride, half = stride, cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                         nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU())
        c2 = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            nn.Conv2d(c2, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU())

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat([x1, self.branch2(x2)], 1)
        else:
            out = torch.cat([self.branch1(x), self.branch2(x)], 1)
        return shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, num_classes=1000, channels=(24, 116, 232, 464, 1024), depth_mult=1.0):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU())
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for i, (n, cout) in enumerate(zip((4, 8, 4), channels[1:4])):
            n = repeats(n, depth_mult)
            setattr(self, f"stage{i + 2}", nn.Sequential(ShuffleBlock(cin, cout, 2),
                                                          *[ShuffleBlock(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[4], 1, bias=False), nn.BatchNorm2d(channels[4]), nn.ReLU())
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x):
        x = self.conv5(self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x))))))
        return self.fc(x.mean([2, 3]))


class MixedDepthwise(nn.Module):
    def __init__(self, c, kernels, stride):
        super().__init__()
        self.sizes = lk_mixnet.split_channels(c, len(kernels))
        self.convs = nn.Sequential(*[nn.Conv2d(ci, ci, k, stride, k // 2, groups=ci, bias=False)
                                     for ci, k in zip(self.sizes, kernels)])

    def forward(self, x):
        if len(self.sizes) == 1:
            return self.convs[0](x)
        return torch.cat([conv(p) for conv, p in zip(self.convs, torch.split(x, self.sizes, 1))], 1)


class MixBlock(nn.Module):
    def __init__(self, cin, cout, kernels, stride, e, a, se):
        super().__init__()
        hidden = cin * e
        self.res = stride == 1 and cin == cout
        self.expand = conv_bn_act(cin, hidden, 1, a=a) if e != 1 else None
        self.dw, self.bn, self.a = MixedDepthwise(hidden, kernels, stride), nn.BatchNorm2d(hidden), act(a)
        self.se = SE(hidden, max(1, cin // 2), a, "sigmoid") if se else None
        self.project = conv_bn_act(hidden, cout, 1, a=None)

    def forward(self, x):
        y = self.expand(x) if self.expand is not None else x
        y = self.a(self.bn(self.dw(y)))
        y = self.project(self.se(y) if self.se is not None else y)
        return x + y if self.res else y


class MixNet(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, max_blocks=None):
        super().__init__()
        ch = lambda c: make_divisible(c * width_mult, 8)  # noqa: E731
        setting = lk_mixnet._MIXNET_S if max_blocks is None else lk_mixnet._MIXNET_S[:max_blocks]
        self.stem = conv_bn_act(3, ch(16), 3, 2, a="relu")
        self.blocks = nn.Sequential(*[MixBlock(ch(i), ch(o), k, s, e, a, se) for i, o, k, s, e, a, se in setting])
        self.head = conv_bn_act(ch(setting[-1][1]), 1536, 1, a="relu")
        self.classifier = nn.Linear(1536, num_classes)

    def forward(self, x):
        return self.classifier(pool(self.head(self.blocks(self.stem(x)))))


# -- UNet ------------------------------------------------------------------------------------------
def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Up(nn.Module):
    def __init__(self, cin, cout, transposed):
        super().__init__()
        self.transposed = transposed
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, 2) if transposed else nn.Conv2d(cin, cin // 2, 1)
        self.conv = double_conv(cin, cout)

    def forward(self, x, skip):
        x = self.up(x if self.transposed else F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
        return self.conv(torch.cat([skip, x], 1))


class UNet(nn.Module):
    def __init__(self, num_classes=2, base=64, depth=4):
        super().__init__()
        self.inc = double_conv(3, base)
        self.downs = nn.Sequential(*[double_conv(base * 2**i, base * 2 ** (i + 1)) for i in range(depth)])
        self.ups = nn.Sequential(*[Up(base * 2 ** (i + 1), base * 2**i, i % 2 == 0) for i in reversed(range(depth))])
        self.outc = nn.Conv2d(base, num_classes, 1)

    def forward(self, x):
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(F.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


def build_twin(name: str, kwargs: dict):
    """The twin of zoo model ``name`` built with the same keyword arguments (minus ``seed``)."""
    kw = {k: v for k, v in kwargs.items() if k != "seed"}
    if name == "small_cnn":
        return SmallCNN()
    if name in ("resnet18", "resnet50"):
        block, default = (Basic, (2, 2, 2, 2)) if name == "resnet18" else (Bottle, (3, 4, 6, 3))
        return ResNet(block, kw.get("layers", default), kw.get("num_classes", 1000), kw.get("width", 64))
    if name in ("mobilenet_v3_small", "mobilenet_v3_large"):
        setting, last = ((lk_mobilenet._V3_SMALL, 1024) if name.endswith("small") else (lk_mobilenet._V3_LARGE, 1280))
        return MobileNetV3(setting, last, kw.get("num_classes", 1000), kw.get("width_mult", 1.0))
    classes = {"mobilenet_v2": MobileNetV2, "efficientnet_b0": EfficientNet, "shufflenet_v2": ShuffleNetV2,
               "mixnet_s": MixNet, "convnext_tiny": ConvNeXt, "vit_deit_tiny": ViT, "swin_tiny": Swin, "unet": UNet}
    return classes[name](**kw)


def load_weights(twin, model) -> None:
    """Copy the zoo model's parameters into the twin (names must match, all of them)."""
    state = {k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()}
    missing, unexpected = twin.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    assert not missing and not unexpected, (missing, unexpected)
    twin.eval()

