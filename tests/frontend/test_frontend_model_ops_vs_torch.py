"""The mobile-CNN and transformer ops of lowerkit.ops and lowerkit.nn mean what torch's do
(traced, run on reference, compared with torch on the same arrays and weights)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerkit as lk
from lowerkit import nn, ops
from lowerkit.errors import InputError

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytest.importorskip("lowerkit_reference")


def _run(fn, *arrays):
    return lk.trace(fn, *arrays)(*arrays)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _close(got, want, rtol=1e-4, atol=1e-5):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=rtol, atol=atol)


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((2, 6, 5, 4)).astype(np.float32) * 3


def test_activations_and_math(x):
    def f(a):
        return (ops.hardsigmoid(a), ops.hardswish(a), ops.silu(a), ops.gelu(a), ops.gelu(a, "tanh"),
                ops.erf(a), ops.pow(ops.hardsigmoid(a), 2.0), ops.where(x > 0, a, 0.5))

    t = _t(x)
    _close(_run(f, x), (F.hardsigmoid(t), F.hardswish(t), F.silu(t), F.gelu(t), F.gelu(t, approximate="tanh"),
                        torch.erf(t), F.hardsigmoid(t) ** 2, torch.where(t > 0, t, 0.5)))


def test_reductions(x):
    def f(a):
        return (ops.mean(a, (2, 3), keepdim=True), ops.sum(a, 1), ops.amax(a, -1), ops.amin(a, (0, 2), True),
                ops.max(a), ops.min(a), ops.mean(a))

    t = _t(x)
    _close(_run(f, x), (t.mean((2, 3), keepdim=True), t.sum(1), t.amax(-1), t.amin((0, 2), keepdim=True),
                        t.max(), t.min(), t.mean()))
    with pytest.raises(InputError, match="use amax"):
        _run(lambda a: ops.max(a, 1), x)


def test_selection_and_shapes(x):
    def f(a):
        parts = ops.split(a, 4, dim=1)
        chunks = ops.chunk(a, 3, dim=2)
        return (*parts, *chunks, ops.slice(a, 1, 1, None, 2), ops.narrow(a, 3, 1, 2),
                ops.index_select(a, 1, [5, 0, 5]), ops.select(a, 2, -1), ops.pad(a, (1, 2, 0, 1)),
                ops.pad(a, (2, 1, 1, 0), "reflect"), ops.pad(a, (1, 1, 2, 0), "replicate"),
                ops.unsqueeze(ops.squeeze(ops.slice(a, 3, 0, 1)), 0), ops.expand(ops.slice(a, 0, 0, 1), 3, -1, -1, -1),
                ops.channel_shuffle(a, 3))

    t = _t(x)
    want = (*torch.split(t, 4, 1), *torch.chunk(t, 3, 2), t[:, 1::2], torch.narrow(t, 3, 1, 2),
            torch.index_select(t, 1, torch.tensor([5, 0, 5])), torch.select(t, 2, -1), F.pad(t, (1, 2, 0, 1)),
            F.pad(t, (2, 1, 1, 0), "reflect"), F.pad(t, (1, 1, 2, 0), "replicate"),
            torch.squeeze(t[..., :1]).unsqueeze(0), t[:1].expand(3, -1, -1, -1), F.channel_shuffle(t, 3))
    _close(_run(f, x), want)


@settings(max_examples=15, deadline=None)
@given(mode=st.sampled_from(["nearest", "bilinear"]), factor=st.sampled_from([None, 2, 1.5, 0.5, (2, 3)]),
       align=st.booleans(), seed=st.integers(0, 99))
def test_interpolate_matches_torch(mode, factor, align, seed):
    x = np.random.default_rng(seed).standard_normal((1, 2, 5, 6)).astype(np.float32)
    kwargs = {"scale_factor": factor} if factor is not None else {"size": (7, 4)}
    if mode == "bilinear":
        kwargs["align_corners"] = align
    got = _run(lambda a: ops.interpolate(a, mode=mode, **kwargs), x)
    _close(got, F.interpolate(_t(x), mode=mode, **kwargs))


def test_attention_and_matmul():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
    mask = rng.random((4, 4)) > 0.2
    mask[:, 0] = True

    def f(a, b, c):
        return (ops.scaled_dot_product_attention(a, b, c), ops.scaled_dot_product_attention(a, b, c, is_causal=True),
                ops.scaled_dot_product_attention(a, b, c, mask, scale=0.3), ops.matmul(a, ops.transpose(b, -1, -2)))

    tq, tk, tv = _t(q), _t(k), _t(v)
    want = (F.scaled_dot_product_attention(tq, tk, tv), F.scaled_dot_product_attention(tq, tk, tv, is_causal=True),
            F.scaled_dot_product_attention(tq, tk, tv, _t(mask), scale=0.3), tq @ tk.transpose(-1, -2))
    _close(_run(f, q, k, v), want)


def _copy_into(ours: nn.Module, theirs) -> None:
    """Give the torch twin lowerkit's parameters (same names)."""
    state = {name: torch.from_numpy(np.asarray(p)) for name, p in ours.state_dict().items()}
    theirs.load_state_dict(state)


LAYERS = [
    (lambda: nn.Hardsigmoid(), lambda: torch.nn.Hardsigmoid()),
    (lambda: nn.Hardswish(), lambda: torch.nn.Hardswish()),
    (lambda: nn.SiLU(), lambda: torch.nn.SiLU()),
    (lambda: nn.GELU("tanh"), lambda: torch.nn.GELU("tanh")),
    (lambda: nn.LayerNorm(4), lambda: torch.nn.LayerNorm(4)),
    (lambda: nn.LayerNorm((5, 4), bias=False), lambda: torch.nn.LayerNorm((5, 4), bias=False)),
    (lambda: nn.GroupNorm(3, 6), lambda: torch.nn.GroupNorm(3, 6)),
    (lambda: nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
     lambda: torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)),
    (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), lambda: torch.nn.Upsample(scale_factor=2, mode="bilinear")),
    (lambda: nn.ZeroPad2d((1, 0, 2, 1)), lambda: torch.nn.ZeroPad2d((1, 0, 2, 1))),
    (lambda: nn.ReflectionPad2d(1), lambda: torch.nn.ReflectionPad2d(1)),
    (lambda: nn.ReplicationPad2d((0, 1, 1, 0)), lambda: torch.nn.ReplicationPad2d((0, 1, 1, 0))),
    (lambda: nn.ChannelShuffle(2), lambda: torch.nn.ChannelShuffle(2)),
]


@pytest.mark.parametrize("make", LAYERS, ids=lambda m: type(m[1]()).__name__ if isinstance(m, tuple) else "")
def test_layers_match_torch(make, x):
    ours, theirs = make[0](), make[1]()
    rng = np.random.default_rng(3)
    if not isinstance(ours, nn.ConvTranspose2d):  # affine parameters other than ones and zeros
        for p in ours.parameters():
            p.data = rng.standard_normal(p.shape).astype(np.float32)
    _close_layer(ours, theirs, x)


def _close_layer(ours, theirs, x):
    _copy_into(ours, theirs)
    got = lk.trace(ours, x)(x)
    _close(got, theirs.eval()(_t(x)), atol=1e-4)


def test_ops_outside_trace_are_input_errors(x):
    with pytest.raises(InputError, match="outside lowerkit.trace"):
        ops.layer_norm(x, (4,))
