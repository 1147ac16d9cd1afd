"""lowerkit.backend.cpu.jit.relu_inplace: the compiled pass (large contiguous float32) and
numpy's maximum (small, strided or other dtypes) give numpy's ReLU, NaN and infinities included."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.backend.cpu import jit


def _values(n: int, dtype=np.float32) -> np.ndarray:
    a = np.random.default_rng(n).standard_normal(n).astype(dtype)
    a[:6] = [np.nan, -np.inf, np.inf, -0.0, 0.0, -1e-40]  # a float32 denormal last
    return a


@pytest.mark.parametrize("n", [7, jit.COMPILED_RELU_MIN - 1, jit.COMPILED_RELU_MIN, 3 * jit.COMPILED_RELU_MIN + 5])
def test_relu_inplace_is_numpys_relu(n):
    if n >= jit.COMPILED_RELU_MIN:
        pytest.importorskip("numba")
    a = _values(n)
    want = np.maximum(a, np.float32(0))
    jit.relu_inplace(a)
    np.testing.assert_array_equal(a, want)  # NaN in the same places; -0.0 == 0.0


def test_relu_inplace_on_strided_and_float64_arrays():
    a = _values(3 * jit.COMPILED_RELU_MIN).reshape(3, -1)
    view = a[:, ::2]  # not contiguous: numpy's maximum, in place through the view
    want = np.maximum(view, 0)
    jit.relu_inplace(view)
    np.testing.assert_array_equal(view, want)
    assert np.isnan(a[0, 0]) and a[0, 1] == -np.inf  # the skipped columns untouched
    d = _values(2 * jit.COMPILED_RELU_MIN, np.float64)
    want = np.maximum(d, 0)
    jit.relu_inplace(d)
    np.testing.assert_array_equal(d, want)


@pytest.mark.parametrize("act", ["none", "relu", "clip", "hardswish", "silu", "gelu"])
@pytest.mark.parametrize("n", [1, 4095, 4096, 3 * 4096 + 17])
def test_add_activation_is_the_sum_then_the_compiled_activation(n, act):
    """``jit.conv.add_activation``: ``act(a + b)`` in one pass, chunk by chunk, equal bit for bit
    to numpy's sum followed by the compiled in-place activation; into either operand too."""
    pytest.importorskip("numba")
    kernels = jit.load("conv")
    code = jit.activation_code({"act": act, "act_min": -0.5, "act_max": 1.5})
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n) * 3).astype(np.float32), (rng.standard_normal(n) * 3).astype(np.float32)
    want = a + b
    kernels.activate(want, *code)
    out = np.full(n, np.nan, np.float32)
    kernels.add_activation(a, b, out, *code)
    np.testing.assert_array_equal(out, want)
    b_copy = b.copy()
    kernels.add_activation(b, a, b, *code)  # into the second operand: the in-place loop too
    np.testing.assert_array_equal(b, want)
    kernels.add_activation(a, b_copy, a, *code)  # in place, as a residual sum into its own buffer
    np.testing.assert_array_equal(a, want)


def test_flat_float32_admits_contiguous_float32_arrays_of_one_shape():
    a = np.zeros((2, 3, 4), np.float32)
    assert jit.flat_float32(a, a.copy(), np.empty_like(a))
    assert not jit.flat_float32(a, np.zeros((3, 4), np.float32))  # broadcast
    assert not jit.flat_float32(a, a.astype(np.float64))
    assert not jit.flat_float32(a, np.zeros((4, 3, 2), np.float32).transpose(2, 1, 0))  # strided


@pytest.mark.parametrize("rows,n", [(1, 1), (7, 49), (576, 49), (33, 197)])
def test_scale_rows_is_numpys_broadcast_product(rows, n):
    """``jit.conv.scale_rows``: each row times its gate, equal bit for bit to numpy's broadcast
    product, into a new array and in place."""
    pytest.importorskip("numba")
    kernels = jit.load("conv")
    rng = np.random.default_rng(rows * n)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    gate = rng.random(rows).astype(np.float32)
    gate[0] = np.inf if rows > 1 else gate[0]  # inf * 0 and inf * x as numpy gives them
    x[0, 0] = 0.0
    with np.errstate(invalid="ignore"):
        want = x * gate[:, None]
    out = np.full_like(x, 7.0)
    kernels.scale_rows(x, gate, out)
    np.testing.assert_array_equal(out, want)
    kernels.scale_rows(x, gate, x)  # in place: the one-array loop
    np.testing.assert_array_equal(x, want)


def test_gate_planes_binds_the_compiled_pass_for_a_float32_map_and_its_gate_only():
    """``jit.gate_planes``: a map [N, C, H, W] times its gate [N, C, 1, 1], into another array or
    in place, equal to numpy's product; None for a gate of another shape or dtype, or a strided
    map."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    gate = rng.random((2, 5, 1, 1)).astype(np.float32)
    want = x * gate
    out = np.full_like(x, 7.0)
    jit.gate_planes(x, gate, out)()
    np.testing.assert_array_equal(out, want)
    jit.gate_planes(x, gate, x)()
    np.testing.assert_array_equal(x, want)
    assert jit.gate_planes(x, gate.reshape(2, 5, 1), out) is None
    assert jit.gate_planes(x, gate.astype(np.float64), out) is None
    assert jit.gate_planes(x[:, :, :, ::2], gate, out[:, :, :, ::2]) is None
