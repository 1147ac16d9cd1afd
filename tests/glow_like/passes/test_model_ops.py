"""glow_like's passes see through the ops of mobile CNNs and transformers: batch-norm folding
(also into conv_transpose2d), bias and activation fusion and memory planning still fire around
them, and the program matches the reference backend."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, rand

import lowerkit as lk
from lowerkit import nn, ops
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._options import parse_options

pytest.importorskip("lowerkit_reference")


def _randomize_batch_norms(model: nn.Module, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if "running_var" in name:
            p.data = rng.uniform(0.5, 2.0, p.shape).astype(np.float32)
        elif "running_mean" in name or name.endswith("bn.bias"):
            p.data = (rng.standard_normal(p.shape) * 0.3).astype(np.float32)


class MobileBlock(nn.Module):
    """MobileNetV3-style: conv-BN-hardswish, depthwise conv-BN, squeeze-excite, projection-BN, residual."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(8, 16, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.dw_bn = nn.BatchNorm2d(16)
        self.se_reduce, self.se_expand = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.project = nn.Conv2d(16, 8, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = ops.hardswish(self.bn(self.expand(x)))
        y = ops.hardswish(self.dw_bn(self.dw(y)))
        s = ops.hardsigmoid(self.se_expand(ops.relu(self.se_reduce(ops.mean(y, (2, 3), keepdim=True)))))
        return x + self.project_bn(self.project(y * s))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = ops.permute(ops.reshape(self.qkv(self.norm1(x)), (b, n, 3, self.heads, c // self.heads)), (2, 0, 3, 1, 4))
        q, k, v = (ops.reshape(part, (b, self.heads, n, c // self.heads)) for part in ops.split(qkv, 1, dim=0))
        attn = ops.reshape(ops.transpose(ops.scaled_dot_product_attention(q, k, v), 1, 2), (b, n, c))
        x = x + self.proj(attn)
        return x + self.fc2(ops.gelu(self.fc1(self.norm2(x))))


class Decoder(nn.Module):
    """UNet-style: transposed conv + BN + ReLU, bilinear upsampling, pad, concat, split."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2)
        self.bn = nn.BatchNorm2d(4)
        self.conv = nn.Conv2d(8, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)

    def forward(self, x):
        a = ops.relu(self.bn(self.up(x)))
        b = ops.interpolate(x, scale_factor=2, mode="bilinear")
        a, _ = ops.split(ops.pad(a, (1, 1, 1, 1), "reflect"), [10, 2], dim=3)
        b = ops.slice(ops.pad(b, (1, 1, 0, 2)), 3, 0, 10)
        return ops.silu(self.norm(self.conv(ops.cat([a, b], 1))))


MODELS = {
    "mobile": (MobileBlock, (1, 8, 6, 6), {"fold_batch_norm", "fuse_activations"}),
    "transformer": (TransformerBlock, (2, 5, 16), {"fuse_bias"}),
    "decoder": (Decoder, (1, 4, 4, 5), {"fold_batch_norm"}),  # into the transposed convolution
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_passes_fire_and_program_matches_reference(name):
    make, shape, expected_passes = MODELS[name]
    with nn.init_seed(0):
        model = make()
    _randomize_batch_norms(model)
    x = rand(*shape)
    module = lk.trace(model, x)
    program = compile_method(module, "forward", parse_options("forward", {}))
    assert expected_passes <= set(program.passes), program.passes
    assert "batch_norm" not in {ins.op for ins in program.instructions}
    plan = program.plan
    assert plan.lower_bound_bytes <= plan.peak_bytes < plan.sum_bytes  # buffers are reused
    for level in (0, 1, 2):
        lowered = lk.to_backend(module, "glow_like", compile_spec={"forward": {"opt_level": level}})
        assert_close([lowered(x)], [module(x)])
    loaded = lk.loads(lk.dumps(lk.to_backend(module, "glow_like")))
    assert_close([loaded(x)], [module(x)])
