"""A Swin-style network: windowed self-attention with relative position bias, shifted windows
on every other block, patch merging between stages."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..tracing import ops
from ._common import initialize
from .vit import Mlp


def relative_position_index(window: int) -> np.ndarray:
    """[window², window²] index into the (2w-1)² bias table for each pair of window positions."""
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :] + (window - 1)
    return (rel[0] * (2 * window - 1) + rel[1]).astype(np.int64)


def shift_mask(size: int, window: int, shift: int) -> np.ndarray:
    """[windows, window², window²] additive mask: -100 between positions of different regions
    of the cyclically shifted image, so shifted windows attend within their region only."""
    region = np.zeros((size, size), dtype=np.int64)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for hs in bounds:
        for ws in bounds:
            region[hs, ws] = label
            label += 1
    windows = region.reshape(size // window, window, size // window, window).transpose(0, 2, 1, 3)
    windows = windows.reshape(-1, window * window)
    return np.where(windows[:, :, None] != windows[:, None, :], -100.0, 0.0).astype(np.float32)


def roll(x: Any, shift: int, dim: int) -> Any:
    """torch.roll by ``shift`` along one dim, as split + concat."""
    size = x.shape[dim]
    shift %= size
    if shift == 0:
        return x
    head, tail = ops.split(x, [size - shift, shift], dim=dim)
    return ops.concat([tail, head], dim)


def window_partition(x: Any, window: int) -> Any:
    """[B, H, W, C] -> [B * windows, window², C]."""
    b, h, w, c = x.shape
    x = ops.reshape(x, (b, h // window, window, w // window, window, c))
    return ops.reshape(ops.permute(x, (0, 1, 3, 2, 4, 5)), (-1, window * window, c))


def window_reverse(x: Any, window: int, b: int, h: int, w: int) -> Any:
    """[B * windows, window², C] -> [B, H, W, C]."""
    c = x.shape[-1]
    x = ops.reshape(x, (b, h // window, w // window, window, window, c))
    return ops.reshape(ops.permute(x, (0, 1, 3, 2, 4, 5)), (b, h, w, c))


class WindowAttention(nn.Module):
    def __init__(self, dim: int, window: int, heads: int) -> None:
        super().__init__()
        self.window, self.heads = window, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(np.zeros(((2 * window - 1) ** 2, heads), np.float32))
        self.index = relative_position_index(window).reshape(-1)

    def forward(self, x: Any, mask: np.ndarray | None) -> Any:
        b, n, c = x.shape
        h = self.heads
        bias = ops.index_select(self.relative_position_bias_table, 0, self.index)
        bias = ops.permute(ops.reshape(bias, (n, n, h)), (2, 0, 1))  # [heads, N, N]
        if mask is not None:  # [windows, N, N] -> [B * windows, 1, N, N], broadcast over heads
            tiled = np.tile(mask, (b // mask.shape[0], 1, 1))[:, None]
            bias = ops.add(ops.reshape(bias, (1, h, n, n)), tiled)
        q, k, v = ops.split(ops.reshape(self.qkv(x), (b, n, 3, h, c // h)), 1, dim=2)
        q, k, v = (ops.transpose(ops.reshape(t, (b, n, h, c // h)), 1, 2) for t in (q, k, v))
        y = ops.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.proj(ops.reshape(ops.transpose(y, 1, 2), (b, n, c)))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, size: int, window: int, shift: int) -> None:
        super().__init__()
        if size <= window:  # one window covers the map: no shift (as Swin does)
            window, shift = size, 0
        self.size, self.window, self.shift = size, window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)
        self.mask = shift_mask(size, window, shift) if shift else None

    def forward(self, x: Any) -> Any:
        b, hw, c = x.shape
        s = self.size
        y = ops.reshape(self.norm1(x), (b, s, s, c))
        if self.shift:
            y = roll(roll(y, -self.shift, 1), -self.shift, 2)
        y = window_reverse(self.attn(window_partition(y, self.window), self.mask), self.window, b, s, s)
        if self.shift:
            y = roll(roll(y, self.shift, 1), self.shift, 2)
        x = x + ops.reshape(y, (b, hw, c))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2x2 neighbouring tokens -> one token of 4C channels -> layer norm -> linear to 2C."""

    def __init__(self, dim: int, size: int) -> None:
        super().__init__()
        self.size = size
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Any) -> Any:
        b, _, c = x.shape
        s = self.size
        x = ops.reshape(x, (b, s // 2, 2, s // 2, 2, c))
        x = ops.reshape(ops.permute(x, (0, 1, 3, 4, 2, 5)), (b, (s // 2) ** 2, 4 * c))
        return self.reduction(self.norm(x))


class SwinTransformer(nn.Module):
    def __init__(self, image_size: int, patch: int, dim: int, depths: tuple[int, ...], heads: tuple[int, ...],
                 window: int, num_classes: int = 1000) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.patch_norm = nn.LayerNorm(dim)
        size = image_size // patch
        stages = []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            blocks: list[nn.Module] = [
                SwinBlock(dim, h, size, window, 0 if j % 2 == 0 else window // 2) for j in range(depth)
            ]
            if i < len(depths) - 1:
                blocks.append(PatchMerging(dim, size))
                dim, size = 2 * dim, size // 2
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.final_size = size

    def forward(self, x: Any) -> Any:
        x = ops.transpose(ops.flatten(self.patch_embed(x), 2), 1, 2)  # [B, tokens, dim]
        x = self.norm(self.layers(self.patch_norm(x)))
        b, n, c = x.shape
        x = ops.reshape(ops.transpose(x, 1, 2), (b, c, self.final_size, self.final_size))
        return self.head(ops.flatten(ops.global_avg_pool2d(x), 1))


def swin_tiny(num_classes: int = 1000, seed: int = 0, *, image_size: int = 224, patch: int = 4, dim: int = 96,
              depths: tuple[int, ...] = (2, 2, 6, 2), heads: tuple[int, ...] = (3, 6, 12, 24),
              window: int = 7) -> SwinTransformer:
    """A Swin-T-like network (windows of 7, shift 3, dims 96-768), input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = SwinTransformer(image_size, patch, dim, tuple(depths), tuple(heads), window, num_classes)
        initialize(model, rng)
        for module in model.modules():
            if isinstance(module, WindowAttention):
                table = module.relative_position_bias_table
                table.data = rng.normal(0.0, 0.5, table.data.shape).astype(np.float32)
    return model
