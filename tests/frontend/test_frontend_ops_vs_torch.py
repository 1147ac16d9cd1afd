"""lowerkit.ops argument forms mean what they mean in torch.nn.functional (traced, run on reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerkit as lk
from lowerkit import ops

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytest.importorskip("lowerkit_reference")

pair = st.one_of(st.integers(1, 2), st.tuples(st.integers(1, 2), st.integers(1, 2)))
pad = st.one_of(st.integers(0, 1), st.tuples(st.integers(0, 1), st.integers(0, 1)))


def _run(fn, *arrays):
    return lk.trace(fn, *arrays)(*arrays)


@settings(max_examples=12, deadline=None)
@given(stride=pair, padding=pad, dilation=pair, groups=st.sampled_from([1, 2]), seed=st.integers(0, 99))
def test_conv2d_matches_torch(stride, padding, dilation, groups, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 4, 7, 6), dtype=np.float32)
    w = rng.standard_normal((4, 4 // groups, 3, 2), dtype=np.float32)
    b = rng.standard_normal(4, dtype=np.float32)
    got = _run(lambda t: ops.conv2d(t, w, b, stride, padding, dilation, groups), x)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, padding, dilation, groups)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_same_padding_matches_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 6), dtype=np.float32)
    w = rng.standard_normal((3, 2, 4, 3), dtype=np.float32)  # even kernel: asymmetric padding
    got = _run(lambda t: ops.conv2d(t, w, padding="same", dilation=(1, 2)), x)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding="same", dilation=(1, 2))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None)
@given(kernel=st.integers(2, 3), stride=st.one_of(st.none(), pair), ceil_mode=st.booleans(),
       include_pad=st.booleans(), seed=st.integers(0, 99))
def test_pools_match_torch(kernel, stride, ceil_mode, include_pad, seed):
    x = np.random.default_rng(seed).standard_normal((1, 2, 7, 8), dtype=np.float32)
    t = torch.from_numpy(x)
    got = _run(lambda a: ops.max_pool2d(a, kernel, stride, 1, 1, ceil_mode), x)
    np.testing.assert_allclose(got, F.max_pool2d(t, kernel, stride, 1, 1, ceil_mode).numpy(), rtol=1e-6)
    got = _run(lambda a: ops.avg_pool2d(a, kernel, stride, 1, ceil_mode, include_pad), x)
    want = F.avg_pool2d(t, kernel, stride, 1, ceil_mode, include_pad).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_functional_ops_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 4), dtype=np.float32)
    mean, var = rng.standard_normal(3, dtype=np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    w = rng.standard_normal((5, 48), dtype=np.float32)
    t = torch.from_numpy(x)

    def f(a):
        y = ops.batch_norm(a, mean, var, eps=1e-3)
        z = ops.linear(ops.flatten(ops.leaky_relu(y, 0.2)), w)
        return ops.log_softmax(z, dim=1), ops.clamp(ops.permute(a, (0, 2, 3, 1)), min=-0.5), ops.transpose(a, 1, 3)

    got = _run(f, x)
    y = F.batch_norm(t, torch.from_numpy(mean), torch.from_numpy(var), eps=1e-3)
    z = F.linear(torch.flatten(F.leaky_relu(y, 0.2), 1), torch.from_numpy(w))
    want = (F.log_softmax(z, dim=1), torch.clamp(t.permute(0, 2, 3, 1), min=-0.5), t.transpose(1, 3))
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-4, atol=1e-5)


def test_conv2d_grads_match_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 6, 6), dtype=np.float32)
    w = rng.standard_normal((2, 2, 3, 3), dtype=np.float32)
    g = rng.standard_normal((1, 2, 3, 3), dtype=np.float32)
    gi = _run(lambda a: ops.conv2d_input_grad(x.shape, w, a, stride=2, padding=1, groups=2), g)
    gw = _run(lambda a, b: ops.conv2d_weight_grad(a, w.shape, b, stride=2, padding=1, groups=2), x, g)
    tg, tw = torch.from_numpy(g), torch.from_numpy(w)
    want_i = torch.nn.grad.conv2d_input(x.shape, tw, tg, stride=2, padding=1, groups=2)
    want_w = torch.nn.grad.conv2d_weight(torch.from_numpy(x), w.shape, tg, stride=2, padding=1, groups=2)
    np.testing.assert_allclose(gi, want_i.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, want_w.numpy(), rtol=1e-4, atol=1e-4)
