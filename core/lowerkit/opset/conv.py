"""2-D convolution and its two gradients.

Layout is NCHW; weights are ``[out_channels, in_channels / groups, KH, KW]``. ``padding``
holds four values in ONNX order ``[top, left, bottom, right]``; each spatial output size is
``floor((size + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride) + 1``.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import MAX_WINDOW, conv_output_size, int_list, require_float, require_rank, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register

_GEOMETRY_ATTRS = (
    AttrSpec("stride", "ints", (1, 1), doc="[stride_h, stride_w]"),
    AttrSpec("padding", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] (ONNX order)"),
    AttrSpec("dilation", "ints", (1, 1), doc="[dilation_h, dilation_w]"),
    AttrSpec("groups", "int", 1, doc="channel groups; groups == in_channels is depthwise"),
)


def _conv_output_shape(
    op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict
) -> tuple[int, int, int, int]:
    """Check a convolution's geometry; return its output shape ``[N, OC, OH, OW]``."""
    stride = int_list(op, attrs, "stride", 2, minimum=1, maximum=MAX_WINDOW)
    padding = int_list(op, attrs, "padding", 4, minimum=0, maximum=MAX_WINDOW)
    dilation = int_list(op, attrs, "dilation", 2, minimum=1, maximum=MAX_WINDOW)
    groups = attrs["groups"]
    if groups < 1:
        raise ShapeError(f"{op}: groups must be >= 1, got {groups}")
    n, c, h, w = x_shape
    oc, cg, kh, kw = w_shape
    if c % groups:
        raise ShapeError(f"{op}: input has {c} channels, not divisible by groups {groups}")
    if oc % groups:
        raise ShapeError(f"{op}: weight has {oc} output channels, not divisible by groups {groups}")
    if cg * groups != c:
        raise ShapeError(
            f"{op}: weight has {cg} input channels per group but input has {c} channels / groups {groups}"
        )
    if kh < 1 or kw < 1:
        raise ShapeError(f"{op}: kernel must be at least 1x1, got {kh}x{kw}")
    oh = conv_output_size(h, kh, stride[0], padding[0], padding[2], dilation[0])
    ow = conv_output_size(w, kw, stride[1], padding[1], padding[3], dilation[1])
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"{op}: kernel {kh}x{kw} with dilation {list(dilation)} does not fit input {h}x{w} "
            f"with padding {list(padding)} (output would be {oh}x{ow})"
        )
    return (n, oc, oh, ow)


def _conv2d(types, attrs):
    x, weight = types[0], types[1]
    named = [("x", x), ("weight", weight)] + ([("bias", types[2])] if len(types) > 2 else [])
    require_same_dtype("conv2d", named)
    require_float("conv2d", "x", x)
    require_rank("conv2d", "x", x, 4)
    require_rank("conv2d", "weight", weight, 4)
    out = _conv_output_shape("conv2d", x.shape, weight.shape, attrs)
    if len(types) > 2 and types[2].shape != (weight.shape[0],):
        raise ShapeError(f"conv2d: bias must have shape [{weight.shape[0]}], got {list(types[2].shape)}")
    return [TensorType(x.dtype, out)]


def _check_grad_output(op: str, grad_output: TensorType, expected: tuple[int, ...], given: str) -> None:
    if grad_output.shape != expected:
        raise ShapeError(
            f"{op}: grad_output has shape {list(grad_output.shape)} but the convolution of {given} "
            f"gives {list(expected)}"
        )


def _conv2d_input_grad(types, attrs):
    weight, grad_output = types
    require_same_dtype("conv2d_input_grad", [("weight", weight), ("grad_output", grad_output)])
    require_float("conv2d_input_grad", "weight", weight)
    require_rank("conv2d_input_grad", "weight", weight, 4)
    require_rank("conv2d_input_grad", "grad_output", grad_output, 4)
    input_size = int_list("conv2d_input_grad", attrs, "input_size", 4, minimum=1)
    out = _conv_output_shape("conv2d_input_grad", input_size, weight.shape, attrs)
    _check_grad_output("conv2d_input_grad", grad_output, out, f"input_size {list(input_size)}")
    return [TensorType(weight.dtype, input_size)]


def _conv2d_weight_grad(types, attrs):
    x, grad_output = types
    require_same_dtype("conv2d_weight_grad", [("input", x), ("grad_output", grad_output)])
    require_float("conv2d_weight_grad", "input", x)
    require_rank("conv2d_weight_grad", "input", x, 4)
    require_rank("conv2d_weight_grad", "grad_output", grad_output, 4)
    weight_size = int_list("conv2d_weight_grad", attrs, "weight_size", 4, minimum=1)
    out = _conv_output_shape("conv2d_weight_grad", x.shape, weight_size, attrs)
    _check_grad_output("conv2d_weight_grad", grad_output, out, f"input {list(x.shape)}")
    return [TensorType(x.dtype, weight_size)]


register(
    OpSchema(
        "conv2d",
        ("x", "weight", "bias"),
        _conv2d,
        attrs=_GEOMETRY_ATTRS,
        num_optional=1,
        doc="2-D cross-correlation as torch.nn.functional.conv2d, with 4-sided zero padding "
        "[top, left, bottom, right], dilation and groups (depthwise when groups == channels).",
    )
)
register(
    OpSchema(
        "conv2d_input_grad",
        ("weight", "grad_output"),
        _conv2d_input_grad,
        attrs=(AttrSpec("input_size", "ints", doc="[N, C, H, W] of the convolution's input"),)
        + _GEOMETRY_ATTRS,
        doc="Gradient of conv2d with respect to its input (torch.nn.grad.conv2d_input), "
        "for the given input_size; rows/columns no window reaches get zero.",
    )
)
register(
    OpSchema(
        "conv2d_weight_grad",
        ("input", "grad_output"),
        _conv2d_weight_grad,
        attrs=(AttrSpec("weight_size", "ints", doc="[OC, C / groups, KH, KW] of the weight"),)
        + _GEOMETRY_ATTRS,
        doc="Gradient of conv2d with respect to its weight (torch.nn.grad.conv2d_weight).",
    )
)
