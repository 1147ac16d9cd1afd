"""A UNet-style encoder/decoder: max-pool down, transposed-conv or bilinear up, skip concatenation."""

from __future__ import annotations

from typing import Any

from .. import nn
from ..tracing import ops
from ._common import initialize


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class Up(nn.Module):
    """Upsample 2x (transposed conv, or bilinear interpolation then 1x1 conv), concat the skip, double conv."""

    def __init__(self, cin: int, cout: int, transposed: bool) -> None:
        super().__init__()
        self.transposed = transposed
        if transposed:
            self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        else:
            self.up = nn.Conv2d(cin, cin // 2, 1)
        self.conv = double_conv(cin, cout)

    def forward(self, x: Any, skip: Any) -> Any:
        if self.transposed:
            x = self.up(x)
        else:
            x = self.up(ops.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
        return self.conv(ops.concat([skip, x], 1))


class UNet(nn.Module):
    def __init__(self, num_classes: int = 2, base: int = 64, depth: int = 4) -> None:
        super().__init__()
        self.inc = double_conv(3, base)
        self.downs = nn.Sequential(*[double_conv(base * 2**i, base * 2 ** (i + 1)) for i in range(depth)])
        # from the deepest level up; transposed convs and bilinear upsampling alternate
        self.ups = nn.Sequential(*[
            Up(base * 2 ** (i + 1), base * 2**i, transposed=(i % 2 == 0)) for i in reversed(range(depth))
        ])
        self.outc = nn.Conv2d(base, num_classes, 1)

    def forward(self, x: Any) -> Any:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(ops.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)


def unet(num_classes: int = 2, seed: int = 0, *, base: int = 64, depth: int = 4) -> UNet:
    """A UNet (4 levels, 64-1024 channels), input [1, 3, 256, 256], output [1, num_classes, 256, 256].

    The input size must be divisible by 2**depth.
    """
    with nn.init_seed(seed) as rng:
        model = UNet(num_classes, base, depth)
        initialize(model, rng)
    return model
