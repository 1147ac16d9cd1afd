"""A Vision Transformer with DeiT-tiny geometry (patch 16, width 192, 12 blocks, 3 heads)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..tracing import ops
from ._common import initialize


class Attention(nn.Module):
    """Multi-head self-attention: one qkv projection, scaled_dot_product_attention, output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        b, n, c = x.shape
        h = self.heads
        q, k, v = ops.split(ops.reshape(self.qkv(x), (b, n, 3, h, c // h)), 1, dim=2)
        q, k, v = (ops.transpose(ops.reshape(t, (b, n, h, c // h)), 1, 2) for t in (q, k, v))
        y = ops.scaled_dot_product_attention(q, k, v)
        return self.proj(ops.reshape(ops.transpose(y, 1, 2), (b, n, c)))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Any) -> Any:
        return self.fc2(ops.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    """Non-overlapping patches -> tokens: a stride-``patch`` conv, then [N, tokens, dim]."""

    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)

    def forward(self, x: Any) -> Any:
        return ops.transpose(ops.flatten(self.proj(x), 2), 1, 2)


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int, patch: int, dim: int, depth: int, heads: int,
                 num_classes: int = 1000) -> None:
        super().__init__()
        tokens = (image_size // patch) ** 2
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(np.zeros((1, 1, dim), dtype=np.float32))
        self.pos_embed = nn.Parameter(np.zeros((1, tokens + 1, dim), dtype=np.float32))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Any) -> Any:
        x = self.patch_embed(x)
        b, n, c = x.shape
        cls = ops.expand(self.cls_token, (b, 1, c))
        x = ops.add(ops.concat([cls, x], 1), self.pos_embed)
        x = self.norm(self.blocks(x))
        cls_out, _ = ops.split(x, [1, n], dim=1)
        return self.head(ops.reshape(cls_out, (b, c)))


def vit_deit_tiny(num_classes: int = 1000, seed: int = 0, *, image_size: int = 224, patch: int = 16,
                  dim: int = 192, depth: int = 12, heads: int = 3) -> VisionTransformer:
    """ViT with DeiT-tiny geometry (patch 16, dim 192, depth 12, 3 heads), input [1, 3, 224, 224]."""
    with nn.init_seed(seed) as rng:
        model = VisionTransformer(image_size, patch, dim, depth, heads, num_classes)
        initialize(model, rng)
        model.cls_token.data = rng.normal(0.0, 0.02, model.cls_token.data.shape).astype(np.float32)
        model.pos_embed.data = rng.normal(0.0, 0.02, model.pos_embed.data.shape).astype(np.float32)
    return model
