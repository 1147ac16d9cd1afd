"""Property sweeps: conv2d and pooling gradients against torch.autograd over random geometry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.autograd.autograd_helpers import rel_error, run_grad, single_op_module

torch = pytest.importorskip("torch")
pytest.importorskip("lowerkit_reference")
F = torch.nn.functional
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 2]))
    c, oc = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h = draw(st.integers(dh * (kh - 1) + 1, 7))
    w = draw(st.integers(dw * (kw - 1) + 1, 7))
    bias = draw(st.booleans())
    return (draw(st.integers(1, 2)), c, h, w), (oc, c // groups, kh, kw), stride, pads, (dh, dw), groups, bias


@SETTINGS
@given(conv_cases(), st.integers(0, 2**16))
# a bias gradient that cancels: torch's float32 was 2.3e-4 off float64, ours 9.3e-5
@example(((1, 2, 7, 7), (1, 2, 3, 2), (1, 2), (0, 0, 0, 0), (2, 1), 1, True), 121)
def test_conv2d_gradients_match_torch(case, seed):
    xs, ws, stride, pads, dilation, groups, bias = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]
    if bias:
        arrays.append(rng.standard_normal(ws[0]).astype(np.float32))
    attrs = {"stride": stride, "padding": pads, "dilation": dilation, "groups": groups}
    module = single_op_module("conv2d", arrays, attrs)
    top, left, bottom, right = pads

    def torch_grads(inputs, cotangent):  # in float64: the oracle, not a second float32 rounding
        tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inputs]
        out = F.conv2d(F.pad(tensors[0], (left, right, top, bottom)), tensors[1], tensors[2] if bias else None,
                       stride, 0, dilation, groups)
        if cotangent is None:
            return out
        return [t.numpy() for t in torch.autograd.grad(out, tensors, torch.from_numpy(cotangent))]

    cot = rng.standard_normal(tuple(torch_grads(arrays, None).shape)).astype(np.float32)
    theirs = torch_grads(arrays, cot.astype(np.float64))
    # float32's own rounding bound: each gradient is a sum of products, off by about n * eps
    # times the sum of their magnitudes — the gradients of |x|, |w| and |cot| (a bias's
    # gradient, a sum of the cotangent, can cancel to far below its terms)
    magnitudes = torch_grads([np.abs(a).astype(np.float64) for a in arrays], np.abs(cot).astype(np.float64))
    _, ours = run_grad(module, arrays, [cot], [f"in{i}" for i in range(len(arrays))])
    for g, t, m in zip(ours, theirs, magnitudes):
        error = np.linalg.norm(np.asarray(g, np.float64) - t)
        assert error <= 1e-4 * np.linalg.norm(t) + 1e-5 * np.linalg.norm(m), (rel_error(g, t), error)


@SETTINGS
@given(st.sampled_from(["max", "avg"]), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_pool_gradients_match_torch(kind, kh, kw, sh, sw, pad, ceil, seed):
    ph, pw = (kh // 2, kw // 2) if pad else (0, 0)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
    attrs = {"kernel_size": (kh, kw), "stride": (sh, sw), "padding": (ph, pw, ph, pw), "ceil_mode": ceil}
    module = single_op_module(f"{kind}_pool2d", [x], attrs)
    t = torch.tensor(x, requires_grad=True)
    pool = F.max_pool2d if kind == "max" else F.avg_pool2d
    out = pool(t, (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil)
    cot = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    (theirs,) = torch.autograd.grad(out, [t], torch.from_numpy(cot))
    _, (ours,) = run_grad(module, [x], [cot], ["in0"])
    assert rel_error(ours, theirs.numpy()) < 1e-4
