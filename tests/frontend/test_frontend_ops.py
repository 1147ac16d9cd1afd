"""lowerkit.ops: the node each function records, attribute normalisation and errors."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import ops
from tests.frontend.frontend_helpers import nodes_of, ops_of

IMG = np.zeros((1, 4, 6, 6), np.float32)
W = np.zeros((8, 4, 3, 3), np.float32)
B = np.zeros(8, np.float32)


def _node(fn, *inputs):
    """Trace ``fn`` and return its last node."""
    return lk.graph_of(lk.trace(fn, *inputs)).nodes[-1]


@pytest.mark.parametrize(
    "fn, op, attrs",
    [
        (ops.relu, "relu", {}),
        (ops.relu6, "relu6", {}),
        (ops.sigmoid, "sigmoid", {}),
        (ops.tanh, "tanh", {}),
        (ops.exp, "exp", {}),
        (ops.log, "log", {}),
        (ops.sqrt, "sqrt", {}),
        (ops.neg, "neg", {}),
        (lambda x: ops.leaky_relu(x, 0.2), "leaky_relu", {"negative_slope": 0.2}),
        (ops.leaky_relu, "leaky_relu", {"negative_slope": 0.01}),
        (lambda x: ops.clamp(x, min=0.0), "clip", {"min": 0.0, "max": float("inf")}),
        (lambda x: ops.clip(x, max=1), "clip", {"min": float("-inf"), "max": 1.0}),
        (lambda x: ops.softmax(x, 1), "softmax", {"dim": 1}),
        (ops.log_softmax, "log_softmax", {"dim": -1}),
        (ops.flatten, "flatten", {"start_dim": 1, "end_dim": -1}),
        (lambda x: ops.reshape(x, (4, -1)), "reshape", {"shape": (4, -1)}),
        (ops.global_avg_pool2d, "global_avg_pool2d", {}),
        (lambda x: ops.adaptive_avg_pool2d(x, (1, 1)), "global_avg_pool2d", {}),
        (lambda x: ops.transpose(x, 1, -1), "transpose", {"perm": (0, 3, 2, 1)}),
        (lambda x: ops.permute(x, (0, 2, 3, 1)), "transpose", {"perm": (0, 2, 3, 1)}),
        (lambda x: ops.cat([x, x], dim=1), "concat", {"dim": 1}),
    ],
)
def test_unary_and_shape_ops(fn, op, attrs):
    node = _node(fn, IMG)
    assert node.op == op
    assert node.attrs == attrs


@pytest.mark.parametrize("fn, op", [(ops.add, "add"), (ops.sub, "sub"), (ops.mul, "mul"), (ops.div, "div")])
def test_binary_ops_with_scalar(fn, op):
    m = lk.trace(lambda x: fn(x, 3), IMG)
    assert ops_of(m) == ["constant", op]


def test_matmul_and_linear():
    x = np.zeros((2, 5), np.float32)
    w = np.zeros((3, 5), np.float32)
    assert _node(lambda a: ops.matmul(a, w.T), x).outputs[0].type.shape == (2, 3)
    node = _node(lambda a: ops.linear(a, w, np.zeros(3, np.float32)), x)
    assert node.op == "linear" and len(node.inputs) == 3 and node.outputs[0].type.shape == (2, 3)
    assert len(_node(lambda a: ops.linear(a, w), x).inputs) == 2


@pytest.mark.parametrize(
    "padding, expected",
    [(0, (0, 0, 0, 0)), (1, (1, 1, 1, 1)), ((1, 2), (1, 2, 1, 2)), ((0, 1, 2, 3), (0, 1, 2, 3)),
     ("valid", (0, 0, 0, 0)), ("same", (1, 1, 1, 1))],
)
def test_conv2d_padding_forms(padding, expected):
    node = _node(lambda x: ops.conv2d(x, W, B, padding=padding), IMG)
    assert node.attrs == {"stride": (1, 1), "padding": expected, "dilation": (1, 1), "groups": 1}


def test_conv2d_attributes_and_groups():
    w = np.zeros((4, 1, 3, 3), np.float32)
    node = _node(lambda x: ops.conv2d(x, w, None, stride=2, padding=(1, 0), dilation=(1, 2), groups=4), IMG)
    assert node.attrs == {"stride": (2, 2), "padding": (1, 0, 1, 0), "dilation": (1, 2), "groups": 4}
    assert len(node.inputs) == 2


def test_conv2d_grad_ops_follow_torch_argument_order():
    grad = np.zeros((1, 8, 4, 4), np.float32)
    node = _node(lambda g: ops.conv2d_input_grad((1, 4, 6, 6), W, g), grad)
    assert node.op == "conv2d_input_grad" and node.attrs["input_size"] == (1, 4, 6, 6)
    assert [v.type.shape for v in node.inputs] == [W.shape, grad.shape]
    node = _node(lambda x, g: ops.conv2d_weight_grad(x, W.shape, g), IMG, grad)
    assert node.op == "conv2d_weight_grad" and node.attrs["weight_size"] == W.shape
    assert node.outputs[0].type.shape == W.shape


def test_pool_defaults():
    node = _node(lambda x: ops.max_pool2d(x, 2), IMG)
    assert node.attrs == {
        "kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1), "ceil_mode": False,
    }
    node = _node(lambda x: ops.avg_pool2d(x, 3, 1, 1, count_include_pad=False), IMG)
    assert node.attrs == {
        "kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1, 1, 1), "ceil_mode": False,
        "count_include_pad": False,
    }


def test_batch_norm_fills_missing_weight_and_bias():
    stats = np.full(4, 0.5, np.float32)
    m = lk.trace(lambda x: ops.batch_norm(x, stats, stats + 1, eps=1e-3), IMG)
    bn = nodes_of(m, "batch_norm")[0]
    assert bn.attrs == {"eps": 1e-3}
    consts = {n.outputs[0]: n.attrs["value"] for n in nodes_of(m, "constant")}
    np.testing.assert_array_equal(consts[bn.inputs[3]], np.ones(4, np.float32))
    np.testing.assert_array_equal(consts[bn.inputs[4]], np.zeros(4, np.float32))


def test_constant():
    m = lk.trace(lambda x: x + ops.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(6), np.zeros(6, np.float64))
    assert nodes_of(m, "constant")[0].attrs["value"].dtype == np.float64


def test_ops_outside_trace_raise():
    with pytest.raises(lk.InputError, match=r"lowerkit.ops.relu was called outside lowerkit.trace.*lowerkit.trace"):
        ops.relu(np.ones(3, np.float32))
    with pytest.raises(lk.InputError, match="outside lowerkit.trace"):
        ops.constant(np.ones(3))


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda x: ops.clip(x), "at least one of min and max"),
        (lambda x: ops.adaptive_avg_pool2d(x, 2), "only output_size 1"),
        (lambda x: ops.max_pool2d(x, 2, return_indices=True), "return_indices"),
        (lambda x: ops.avg_pool2d(x, 2, divisor_override=3), "divisor_override"),
        (lambda x: ops.conv2d(x, W, padding=(1, 2, 3)), r"padding must be an int, \(h, w\)"),
        (lambda x: ops.conv2d(x, W, stride=2, padding="same"), "needs stride 1"),
        (lambda x: ops.batch_norm(x, B, B, training=True), "inference"),
        (lambda x: ops.transpose(x, 0, 4), "dim 4 is out of range"),
        (lambda x: ops.permute(x, (0, 1, 1, 2)), "not a permutation"),
        (lambda x: ops.concat([]), "non-empty"),
        (lambda x: ops.conv2d(x, np.zeros((8, 3, 3, 3), np.float32)), r"conv2d at \S+:\d+: "),
        (lambda x: ops.conv2d_input_grad((1, 4, 6), W, x), r"input_size must be the 4-d shape"),
    ],
)
def test_op_errors(fn, match):
    with pytest.raises(lk.InputError, match=match):
        lk.trace(fn, IMG)
