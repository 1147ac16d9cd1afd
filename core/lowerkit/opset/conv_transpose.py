"""``conv_transpose2d``: the transpose (gradient) of conv2d, as a layer.

Weights are ``[in_channels, out_channels / groups, KH, KW]`` (torch's layout); ``padding`` is
``[top, left, bottom, right]`` and removes rows/columns from the full output; each spatial
output size is ``(size - 1) * stride - pad_begin - pad_end + dilation * (kernel - 1) +
output_padding + 1``.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import int_list, require_float, require_rank, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register


def conv_transpose_output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                               dilation: int, output_padding: int) -> int:
    return (size - 1) * stride - pad_begin - pad_end + dilation * (kernel - 1) + output_padding + 1


def _conv_transpose2d(types, attrs):
    op = "conv_transpose2d"
    x, weight = types[0], types[1]
    require_same_dtype(op, [("x", x), ("weight", weight)] + ([("bias", types[2])] if len(types) > 2 else []))
    require_float(op, "x", x)
    require_rank(op, "x", x, 4)
    require_rank(op, "weight", weight, 4)
    stride = int_list(op, attrs, "stride", 2, minimum=1)
    padding = int_list(op, attrs, "padding", 4, minimum=0)
    output_padding = int_list(op, attrs, "output_padding", 2, minimum=0)
    dilation = int_list(op, attrs, "dilation", 2, minimum=1)
    groups = attrs["groups"]
    n, c, h, w = x.shape
    ic, ocg, kh, kw = weight.shape
    if groups < 1 or c % groups:
        raise ShapeError(f"{op}: groups {groups} must be >= 1 and divide the {c} input channels")
    if ic != c:
        raise ShapeError(f"{op}: weight is for {ic} input channels but x has {c}")
    for i in range(2):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise ShapeError(
                f"{op}: output_padding {list(output_padding)} must be smaller than stride or dilation"
            )
    oh = conv_transpose_output_size(h, kh, stride[0], padding[0], padding[2], dilation[0], output_padding[0])
    ow = conv_transpose_output_size(w, kw, stride[1], padding[1], padding[3], dilation[1], output_padding[1])
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: padding {list(padding)} leaves no output (would be {oh}x{ow})")
    oc = ocg * groups
    if len(types) > 2 and types[2].shape != (oc,):
        raise ShapeError(f"{op}: bias must have shape [{oc}], got {list(types[2].shape)}")
    return [TensorType(x.dtype, (n, oc, oh, ow))]


register(OpSchema(
    "conv_transpose2d", ("x", "weight", "bias"), _conv_transpose2d,
    attrs=(
        AttrSpec("stride", "ints", (1, 1), doc="[stride_h, stride_w]"),
        AttrSpec("padding", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] removed from the output"),
        AttrSpec("output_padding", "ints", (0, 0), doc="extra rows/columns at the bottom/right"),
        AttrSpec("dilation", "ints", (1, 1), doc="[dilation_h, dilation_w]"),
        AttrSpec("groups", "int", 1, doc="channel groups"),
    ),
    num_optional=1,
    doc="Transposed 2-D convolution as torch.nn.functional.conv_transpose2d (weight [C_in, "
    "C_out / groups, KH, KW]) and ONNX ConvTranspose, with 4-sided padding.",
))
