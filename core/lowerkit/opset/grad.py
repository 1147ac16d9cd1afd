"""Backward ops: what the derivatives table (:mod:`lowerkit.autograd`) needs beyond the forward ops.

Each is the vector-Jacobian product of one forward op (or a broadcast reduction), taking the
forward op's input (or output) and the incoming gradient ``grad`` and returning the gradient
of the input, as PyTorch's backward kernels of the same name do. They are ordinary ops: a
backend may claim them, and the reference backend runs them all.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from ._checks import normalize_dim, require_float, require_same_dtype
from .activation import GELU_APPROXIMATIONS
from .pool import _pool_output_shape
from .registry import AttrSpec, OpSchema, ShapeError, get_schema, register
from . import resize as _resize  # noqa: F401  (interpolate registers before its gradient)


def _sum_to_shape(types, attrs):
    (x,) = types
    shape = tuple(attrs["shape"])
    try:
        broadcast = tuple(np.broadcast_shapes(shape, x.shape))
    except ValueError:
        broadcast = None
    if broadcast != x.shape:
        raise ShapeError(f"sum_to_shape: shape {list(shape)} does not broadcast to x {x}")
    return [TensorType(x.dtype, shape)]


def _pointwise_grad(op: str):
    """``(x, grad) -> grad_x``: two float tensors of one type."""

    def infer(types, attrs):
        x, grad = types
        require_same_dtype(op, [("x", x), ("grad", grad)])
        require_float(op, "x", x)
        if x.shape != grad.shape:
            raise ShapeError(f"{op}: grad has shape {list(grad.shape)} but x has {list(x.shape)}")
        if op == "gelu_grad" and attrs["approximate"] not in GELU_APPROXIMATIONS:
            raise ShapeError(f"gelu_grad: approximate must be 'none' or 'tanh', got {attrs['approximate']!r}")
        if op in ("softmax_grad", "log_softmax_grad"):
            if x.rank == 0:
                raise ShapeError(f"{op}: output must have rank >= 1, got {x}")
            normalize_dim(op, "dim", attrs["dim"], x.rank)
        return [x]

    return infer


def _max_pool2d_grad(types, attrs):
    x, grad = types
    require_same_dtype("max_pool2d_grad", [("x", x), ("grad", grad)])
    out = _pool_output_shape("max_pool2d_grad", x, attrs)
    if grad.shape != out:
        raise ShapeError(f"max_pool2d_grad: grad has shape {list(grad.shape)} but the pool of x {x} gives {list(out)}")
    return [x]


def _avg_pool2d_grad(types, attrs):
    (grad,) = types
    size = tuple(attrs["input_size"])
    if len(size) != 4:
        raise ShapeError(f"avg_pool2d_grad: input_size must have 4 values, got {list(size)}")
    x = TensorType(grad.dtype, size)
    out = _pool_output_shape("avg_pool2d_grad", x, attrs)
    if grad.shape != out:
        raise ShapeError(
            f"avg_pool2d_grad: grad has shape {list(grad.shape)} but the pool of input_size {list(size)} gives {list(out)}"
        )
    return [x]


def _scatter_grad(op: str):
    """``grad -> grad_x`` of a data-movement op, whose input shape is the ``input_size`` attribute."""

    def infer(types, attrs):
        (grad,) = types
        size = tuple(attrs["input_size"])
        if any(d < 0 for d in size):
            raise ShapeError(f"{op}: input_size must be >= 0, got {list(size)}")
        return [TensorType(grad.dtype, size)]

    return infer


def _reduce_extreme_grad(types, attrs):
    x, y, grad = types
    require_same_dtype("reduce_extreme_grad", [("x", x), ("y", y), ("grad", grad)])
    if y.shape != grad.shape:
        raise ShapeError(f"reduce_extreme_grad: grad has shape {list(grad.shape)} but y has {list(y.shape)}")
    return [x]


def _interpolate_grad(types, attrs):
    (grad,) = types
    size = tuple(attrs["input_size"])
    if len(size) != grad.rank:
        raise ShapeError(f"interpolate_grad: input_size {list(size)} must have the rank of grad {grad}")
    x = TensorType(grad.dtype, size)
    forward = {k: v for k, v in attrs.items() if k != "input_size"}
    (out,) = get_schema("interpolate").infer([x], forward)
    if out != grad:
        raise ShapeError(f"interpolate_grad: grad is {grad} but interpolate of {x} gives {out}")
    return [x]


_POOL_ATTRS = (
    AttrSpec("kernel_size", "ints", doc="[KH, KW]"),
    AttrSpec("stride", "ints", doc="[stride_h, stride_w]"),
    AttrSpec("padding", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right]"),
)
_CEIL = AttrSpec("ceil_mode", "bool", False, doc="as the forward pool")

register(OpSchema(
    "sum_to_shape", ("x",), _sum_to_shape,
    attrs=(AttrSpec("shape", "ints", doc="the target shape; it broadcasts to x's shape"),),
    doc="Sums x over the dims numpy broadcasting added or stretched, giving shape: the gradient "
    "of a broadcast (torch's sum_to_size, with leading dims dropped when shape has fewer).",
))
register(OpSchema(
    "relu_grad", ("x", "grad"), _pointwise_grad("relu_grad"),
    doc="grad where x > 0, else 0 (the gradient of relu; torch's threshold_backward at 0).",
))
register(OpSchema(
    "clip_grad", ("x", "grad"), _pointwise_grad("clip_grad"),
    attrs=(AttrSpec("min", "float", float("-inf")), AttrSpec("max", "float", float("inf"))),
    doc="grad where min <= x <= max, else 0 (the gradient of clip and relu6, as torch.clamp's).",
))
register(OpSchema(
    "leaky_relu_grad", ("x", "grad"), _pointwise_grad("leaky_relu_grad"),
    attrs=(AttrSpec("negative_slope", "float", 0.01),),
    doc="grad where x > 0, else negative_slope * grad.",
))
register(OpSchema(
    "hardsigmoid_grad", ("x", "grad"), _pointwise_grad("hardsigmoid_grad"),
    attrs=(AttrSpec("alpha", "float", 1 / 6), AttrSpec("beta", "float", 0.5)),
    doc="alpha * grad where 0 < alpha * x + beta < 1, else 0.",
))
register(OpSchema(
    "hardswish_grad", ("x", "grad"), _pointwise_grad("hardswish_grad"),
    doc="0 below -3, grad * (x / 3 + 0.5) up to 3, grad above (torch's hardswish_backward).",
))
register(OpSchema(
    "gelu_grad", ("x", "grad"), _pointwise_grad("gelu_grad"),
    attrs=(AttrSpec("approximate", "str", "none", doc="'none' or 'tanh', as the forward gelu"),),
    doc="grad * d gelu(x) / dx, exact or for the tanh approximation.",
))
register(OpSchema(
    "softmax_grad", ("y", "grad"), _pointwise_grad("softmax_grad"),
    attrs=(AttrSpec("dim", "int", -1),),
    doc="y * (grad - sum(grad * y, dim)) for y = softmax(x, dim).",
))
register(OpSchema(
    "log_softmax_grad", ("y", "grad"), _pointwise_grad("log_softmax_grad"),
    attrs=(AttrSpec("dim", "int", -1),),
    doc="grad - exp(y) * sum(grad, dim) for y = log_softmax(x, dim).",
))
register(OpSchema(
    "max_pool2d_grad", ("x", "grad"), _max_pool2d_grad,
    attrs=_POOL_ATTRS + (AttrSpec("dilation", "ints", (1, 1), doc="[dh, dw]"), _CEIL),
    doc="Routes each window's grad to the first position of its maximum in x (row-major, as "
    "torch's max_pool2d indices); positions several windows pick accumulate.",
))
register(OpSchema(
    "avg_pool2d_grad", ("grad",), _avg_pool2d_grad,
    attrs=(AttrSpec("input_size", "ints", doc="[N, C, H, W] of the pool's input"),) + _POOL_ATTRS
    + (_CEIL, AttrSpec("count_include_pad", "bool", True)),
    doc="Spreads each window's grad evenly over the input positions it averaged (divided by "
    "the forward divisor).",
))
register(OpSchema(
    "slice_grad", ("grad",), _scatter_grad("slice_grad"),
    attrs=(
        AttrSpec("input_size", "ints", doc="shape of the sliced tensor"),
        AttrSpec("starts", "ints"), AttrSpec("ends", "ints"), AttrSpec("axes", "ints"), AttrSpec("steps", "ints"),
    ),
    doc="Zeros of input_size with grad written where slice (same attributes) read.",
))
register(OpSchema(
    "pad_grad", ("grad",), _scatter_grad("pad_grad"),
    attrs=(
        AttrSpec("input_size", "ints", doc="shape of the padded tensor"),
        AttrSpec("pads", "ints"), AttrSpec("mode", "str", "constant"),
    ),
    doc="The gradient of pad: the interior of grad, plus (reflect, replicate) the padding's "
    "grad added onto the positions it copied.",
))
register(OpSchema(
    "gather_grad", ("grad",), _scatter_grad("gather_grad"),
    attrs=(
        AttrSpec("input_size", "ints", doc="shape of the gathered tensor"),
        AttrSpec("dim", "int", 0), AttrSpec("indices", "tensor"),
    ),
    doc="Zeros of input_size with grad added at the gathered indices (repeated indices accumulate).",
))
register(OpSchema(
    "interpolate_grad", ("grad",), _interpolate_grad,
    attrs=(AttrSpec("input_size", "ints", doc="shape of the resized tensor"),)
    + tuple(get_schema("interpolate").attrs),
    doc="The gradient of interpolate (same attributes): each output's grad added back onto the "
    "input positions it picked (nearest) or blended, with the blend weights (linear).",
))
register(OpSchema(
    "reduce_extreme_grad", ("x", "y", "grad"), _reduce_extreme_grad,
    attrs=(AttrSpec("dims", "ints", ()), AttrSpec("keepdim", "bool", False)),
    doc="The gradient of reduce_max/reduce_min with output y: grad shared evenly among the "
    "positions of x equal to y (as torch.amax's backward).",
))

