"""PyTorch twins of the zoo's layer-norm networks: ConvNeXt, ViT and the Swin-style net.

Plain torch.nn, the zoo models' module trees (see zoo_twins.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lowerkit.models import swin as lk_swin


def pool(x):
    return F.adaptive_avg_pool2d(x, 1).flatten(1)


# -- ConvNeXt, ViT, Swin ---------------------------------------------------------------------------
class LayerNorm2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c, eps=1e-6)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dwconv = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.pwconv1, self.pwconv2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(self.dwconv(x).permute(0, 2, 3, 1)))))
        return x + (y * self.gamma).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, num_classes=1000, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)):
        super().__init__()
        down = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))]
        down += [nn.Sequential(LayerNorm2d(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, 2)) for i in range(len(dims) - 1)]
        self.downsample_layers = nn.Sequential(*down)
        self.stages = nn.Sequential(*[nn.Sequential(*[CNBlock(d) for _ in range(n)]) for n, d in zip(depths, dims)])
        self.norm, self.head = nn.LayerNorm(dims[-1], eps=1e-6), nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        for down, stage in zip(self.downsample_layers, self.stages):
            x = stage(down(x))
        return self.head(self.norm(pool(x)))


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    def __init__(self, num_classes=1000, image_size=224, patch=16, dim=192, depth=12, heads=3):
        super().__init__()
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image_size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


class WindowAttention(Attention):
    def __init__(self, dim, window, heads):
        super().__init__(dim, heads)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        index = torch.from_numpy(lk_swin.relative_position_index(window).reshape(-1))
        self.register_buffer("index", index, persistent=False)

    def forward(self, x, mask=None):
        n = x.shape[1]
        bias = self.relative_position_bias_table[self.index].reshape(n, n, -1).permute(2, 0, 1)
        if mask is not None:
            tiled = torch.from_numpy(np.tile(mask, (x.shape[0] // mask.shape[0], 1, 1))[:, None])
            bias = bias.reshape(1, *bias.shape) + tiled
        return super().forward(x, bias)


def partition(x, w):
    b, h, ww, c = x.shape
    return x.reshape(b, h // w, w, ww // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)


def reverse(x, w, b, h, ww):
    return x.reshape(b, h // w, ww // w, w, w, -1).permute(0, 1, 3, 2, 4, 5).reshape(b, h, ww, -1)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, size, window, shift):
        super().__init__()
        if size <= window:
            window, shift = size, 0
        self.size, self.window, self.shift = size, window, shift
        self.norm1, self.attn = nn.LayerNorm(dim), WindowAttention(dim, window, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim, 4 * dim)
        self.mask = lk_swin.shift_mask(size, window, shift) if shift else None

    def forward(self, x):
        b, hw, c = x.shape
        s, w = self.size, self.window
        y = self.norm1(x).reshape(b, s, s, c)
        if self.shift:
            y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
        y = reverse(self.attn(partition(y, w), self.mask), w, b, s, s)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        x = x + y.reshape(b, hw, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim, size):
        super().__init__()
        self.size, self.norm, self.reduction = size, nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, _, c = x.shape
        s = self.size
        x = x.reshape(b, s // 2, 2, s // 2, 2, c).permute(0, 1, 3, 4, 2, 5).reshape(b, (s // 2) ** 2, 4 * c)
        return self.reduction(self.norm(x))


class Swin(nn.Module):
    def __init__(self, num_classes=1000, image_size=224, patch=4, dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24),
                 window=7):
        super().__init__()
        self.patch_embed, self.patch_norm = nn.Conv2d(3, dim, patch, patch), nn.LayerNorm(dim)
        size, stages = image_size // patch, []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            blocks = [SwinBlock(dim, h, size, window, 0 if j % 2 == 0 else window // 2) for j in range(depth)]
            if i < len(depths) - 1:
                blocks.append(PatchMerging(dim, size))
                dim, size = 2 * dim, size // 2
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.norm(self.layers(self.patch_norm(self.patch_embed(x).flatten(2).transpose(1, 2))))
        return self.head(x.mean(1))
