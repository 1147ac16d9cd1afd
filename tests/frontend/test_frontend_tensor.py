"""TracedTensor: operator overloads, shape methods and what cannot be traced."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn
from tests.frontend.frontend_helpers import nodes_of, ops_of

X = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
W = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize(
    "fn, op, operands",
    [
        (lambda x: x + 2.0, "add", ("x", "c")),
        (lambda x: 2.0 + x, "add", ("c", "x")),
        (lambda x: x - 2.0, "sub", ("x", "c")),
        (lambda x: 2.0 - x, "sub", ("c", "x")),
        (lambda x: x * 2.0, "mul", ("x", "c")),
        (lambda x: 2.0 * x, "mul", ("c", "x")),
        (lambda x: x / 2.0, "div", ("x", "c")),
        (lambda x: 2.0 / x, "div", ("c", "x")),
        (lambda x: x @ W, "matmul", ("x", "c")),
        (lambda x: W[:2].T @ x, "matmul", ("c", "x")),  # numpy on the left defers to us
        (lambda x: X + x, "add", ("c", "x")),
    ],
)
def test_binary_operators_keep_operand_order(fn, op, operands):
    m = lk.trace(fn, X)
    node = nodes_of(m, op)[0]
    kinds = ["x" if v.name == "x" else "c" for v in node.inputs]
    assert kinds == list(operands)


def test_unary_and_shape_methods():
    def f(x):
        assert x.shape == (2, 3) and x.dtype == np.float32 and x.ndim == 2 and len(x) == 2
        assert x.size() == (2, 3) and x.size(1) == 3
        y = (-x).reshape(3, 2).reshape((6,)).reshape(-1, 3)
        return +y.flatten(), y.transpose(0, 1), y.permute(1, 0), y.relu(), y.exp()

    m = lk.trace(f, X)
    assert ops_of(m) == ["neg", "reshape", "reshape", "reshape", "flatten", "transpose", "transpose", "relu", "exp"]
    assert nodes_of(m, "reshape")[2].attrs["shape"] == (-1, 3)
    assert nodes_of(m, "flatten")[0].attrs["start_dim"] == 0  # torch.Tensor.flatten default
    assert [n.attrs["perm"] for n in nodes_of(m, "transpose")] == [(1, 0), (1, 0)]


def test_parameter_on_either_side():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(np.full(3, 2.0, np.float32))

        def forward(self, x):
            return self.scale * x - x * self.scale

    m = lk.trace(M(), X)
    assert ops_of(m) == ["param", "mul", "mul", "sub"]


def test_operators_compute_right_values(reference):
    m = lk.trace(lambda x: (2.0 - x) / 4.0 * x + (x @ W) @ W.T, X)
    np.testing.assert_allclose(m(X), (2.0 - X) / 4.0 * X + (X @ W) @ W.T, rtol=1e-6)


def test_dtype_mismatch_is_an_input_error():
    with pytest.raises(lk.InputError, match=r"add at \S+test_frontend_tensor.py:\d+: .*f64.*\(inputs: f32\[2, 3\], f64\[3\]\)"):
        lk.trace(lambda x: x + np.ones(3), X)


def test_repr_and_conversions():
    def f(x):
        assert repr(x) == "TracedTensor(%x: f32[2, 3])"
        with pytest.raises(lk.InputError, match=r"float\(\)"):
            float(x)
        with pytest.raises(lk.InputError, match="use as an index"):
            [1, 2][x]
        return x

    lk.trace(f, X)


def test_indexing_a_traced_tensor_is_an_input_error():
    def f(x):
        with pytest.raises(lk.InputError, match=r"indexing traced value %x \(f32\[2, 3\]\) in method 'forward' with \[0\]: .*no indexing or slicing op"):
            x[0]
        with pytest.raises(lk.InputError, match=r"with \[\(slice\(None, None, None\), 1\)\]"):
            x[:, 1]
        with pytest.raises(lk.InputError, match="no indexing or slicing op"):
            list(x)
        return x

    lk.trace(f, X)
