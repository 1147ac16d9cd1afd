"""glow_like's ``relu`` kernel: numpy's maximum for small arrays, ``jit.relu_inplace`` (after a
copy, or on the buffer itself when the planner made the ReLU in place) for large ones."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import jit

glow = pytest.importorskip("lowerkit_glow_like")


def _relu(x, out):
    from lowerkit_glow_like.kernels import KERNELS

    return KERNELS["relu"].prepare([x], [out], {}, np.empty(0, np.uint8))


@pytest.mark.parametrize("size", [100, jit.COMPILED_RELU_MIN + 3])
@pytest.mark.parametrize("in_place", [False, True])
def test_relu_kernel_matches_numpy(size, in_place):
    if size >= jit.COMPILED_RELU_MIN:
        pytest.importorskip("numba")
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    x[:3] = [np.nan, -0.0, -np.inf]
    want = np.maximum(x, np.float32(0))
    source = x.copy()
    out = x if in_place else np.full_like(x, 7.0)
    _relu(x, out)()
    np.testing.assert_array_equal(out, want)
    if not in_place:
        np.testing.assert_array_equal(x, source)  # the input is left alone


@pytest.mark.parametrize("act", [{"act": "relu"}, {"act": "clip", "act_min": 0.0, "act_max": 6.0}, {"act": "silu"}])
@pytest.mark.parametrize("case", ["same", "in_place", "broadcast", "float64"])
def test_fused_add_kernel_matches_numpy(case, act, monkeypatch):
    """``glow.add`` with a fused activation: one compiled pass (``jit.conv.add_activation``) for
    float32 operands of one shape — into a fresh buffer or its first operand's — and numpy's
    add then the activation otherwise (a broadcast operand, float64); same values either way."""
    pytest.importorskip("numba")
    from lowerkit_glow_like.kernels import KERNELS
    from lowerkit_glow_like.kernels.chain import numpy_activation

    dtype = np.float64 if case == "float64" else np.float32
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 8, 9, 11)) * 4).astype(dtype)
    b = (rng.standard_normal((8, 1, 1) if case == "broadcast" else a.shape) * 4).astype(dtype)
    code = jit.activation_code(act)
    want = numpy_activation((a + b).astype(np.float32), *code)
    kernels = jit.load("conv")
    fused = []
    real = kernels.add_activation
    monkeypatch.setattr(kernels, "add_activation", lambda *args: (fused.append(1), real(*args))[1])
    out = a if case == "in_place" else np.empty(a.shape, dtype)
    KERNELS["glow.add"].prepare([a, b], [out], act, np.empty(0, np.uint8))()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert bool(fused) == (case in ("same", "in_place"))


@pytest.mark.parametrize("case", ["map_first", "gate_first", "in_place", "float64", "same_shape"])
def test_mul_by_a_gate_runs_the_compiled_row_scaling(case, monkeypatch):
    """``mul`` of a float32 map [N, C, H, W] by a gate [N, C, 1, 1], in either order, into a new
    buffer or the map's own: one compiled pass (``jit.conv.scale_rows``); other operands keep
    numpy's multiply. Both equal numpy's product."""
    pytest.importorskip("numba")
    from lowerkit_glow_like.kernels import KERNELS

    rng = np.random.default_rng(3)
    dtype = np.float64 if case == "float64" else np.float32
    x = rng.standard_normal((2, 5, 3, 4)).astype(dtype)
    gate = rng.random((2, 5, 1, 1) if case != "same_shape" else x.shape).astype(dtype)
    want = x * gate
    out = x if case == "in_place" else np.full_like(x, 7.0)
    calls = []
    real = jit.load("conv").scale_rows
    monkeypatch.setattr(jit.load("conv"), "scale_rows", lambda *a: (calls.append(1), real(*a)))
    operands = [gate, x] if case == "gate_first" else [x, gate]
    KERNELS["mul"].prepare(operands, [out], {}, np.empty(0, np.uint8))()
    np.testing.assert_array_equal(out, want)
    assert bool(calls) == (case in ("map_first", "gate_first", "in_place"))
