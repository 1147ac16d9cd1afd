"""lowerkit.opset.check_op_types: the shared check backends run on stored op applications."""

from __future__ import annotations

import pytest

from lowerkit.ir import TensorType
from lowerkit.opset import MAX_WINDOW, ShapeError, check_op_types

X, W = TensorType("f32", (1, 2, 8, 8)), TensorType("f32", (4, 2, 3, 3))
OUT = TensorType("f32", (1, 4, 8, 8))


def test_consistent_conv_returns_normalized_attributes():
    attrs = check_op_types("conv2d", [X, W], {"padding": [1, 1, 1, 1], "act": "relu"}, [OUT])
    assert attrs == {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"padding": (1, 1, 1, 1), "stride": (MAX_WINDOW + 1, 1)}, "stride values must be <= 65536"),
        ({"padding": (1, 1, 1, 1), "dilation": (1_000_000, 1_000_000)}, "dilation values must be <= 65536"),
        ({"padding": (1, 1, 1, 1), "stride": (0, 0)}, "stride values must be >= 1"),
        ({"padding": (1, 1, 1, 1), "stride": (2, 2)}, r"output 0 is f32\[1, 4, 8, 8\], but .* give f32\[1, 4, 4, 4\]"),
        ({"padding": (1, 1, 1, 1), "groups": 2}, "weight has 2 input channels per group"),
        ({"padding": (1.0, 1, 1, 1)}, "attribute 'padding' expects"),
    ],
)
def test_inconsistent_or_absurd_geometry_is_refused(attrs, message):
    with pytest.raises(ShapeError, match=message):
        check_op_types("conv2d", [X, W], attrs, [OUT])


def test_arity_unknown_ops_and_shapes_only():
    with pytest.raises(ShapeError, match="unknown op"):
        check_op_types("no_such_op", [X], {}, [X])
    with pytest.raises(ShapeError, match="takes 1..1 inputs, got 2"):
        check_op_types("relu", [X, X], {}, [X])
    q = TensorType("u8", (1, 2, 8, 8))
    check_op_types("relu", [q], {}, [q], shapes_only=True)
    with pytest.raises(ShapeError):
        check_op_types("relu", [q], {}, [TensorType("u8", (1, 2, 8, 9))], shapes_only=True)
