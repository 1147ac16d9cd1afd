"""What nnpack claims in partitioning, and the reasons it gives for what it declines."""

from __future__ import annotations

import re

import pytest

from lowerkit.ir.graph import Graph
from lowerkit.ir.types import TensorType
from lowerkit_nnpack import lowerkit_is_supported


def _node(op, shapes, out_shape, attrs, dtype="f32"):
    g = Graph()
    inputs = [g.add_input(f"i{k}", TensorType(dtype, s)) for k, s in enumerate(shapes)]
    return g.add_node(op, inputs, [TensorType(dtype, out_shape)], attrs)


def _conv(k=3, stride=1, padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, c=4):
    return _node("conv2d", [(1, c, 16, 16), (8, c // groups, k, k)], (1, 8, 16, 16),
                 {"stride": (stride, stride), "padding": padding, "dilation": dilation, "groups": groups})


@pytest.mark.parametrize(
    "node",
    [_conv(), _conv(k=16, padding=(15, 0, 0, 0)), _conv(k=3, stride=2), _conv(k=1, padding=(0, 0, 0, 0)),
     _node("relu", [(2, 3)], (2, 3), {}), _node("softmax", [(2, 3)], (2, 3), {"dim": 1}),
     _node("linear", [(2, 3), (4, 3)], (2, 4), {}),
     _node("max_pool2d", [(1, 2, 8, 8)], (1, 2, 4, 4), {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0)}),
     _node("param", [], (2,), {"name": "w"})],
)
def test_claimed(node):
    assert lowerkit_is_supported(node, None) is True


@pytest.mark.parametrize(
    "node,reason",
    [
        (_conv(groups=2), "groups=2 unsupported"),
        (_conv(dilation=(2, 2)), "dilation \\[2, 2\\] unsupported"),
        (_conv(k=17, padding=(0, 0, 0, 0)), "kernel 17x17 exceeds the 16x16 limit"),
        (_conv(k=3, padding=(3, 0, 0, 0)), "must be smaller than the kernel 3x3"),
        (_node("conv2d_input_grad", [(8, 4, 3, 3), (1, 8, 8, 8)], (1, 4, 16, 16),
               {"input_size": (1, 4, 16, 16), "stride": (2, 2), "padding": (1, 1, 1, 1)}), "need stride 1"),
        (_node("tanh", [(2, 3)], (2, 3), {}), "not in NNPACK's layer set"),
        (_node("relu", [(2, 3)], (2, 3), {}, dtype="f64"), "dtype f64 .* unsupported"),
        (_node("softmax", [(2, 3)], (2, 3), {"dim": 0}), "softmax over dim 0"),
        (_node("max_pool2d", [(1, 2, 8, 8)], (1, 2, 4, 4),
               {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0), "ceil_mode": True}), "ceil_mode=True"),
    ],
)
def test_declined_with_reason(node, reason):
    answer = lowerkit_is_supported(node, None)
    assert not answer
    assert re.search(reason, answer.reason), answer.reason
