"""One importer per ONNX op type: ONNX node -> lowerkit nodes.

An importer gets the :class:`~._importer.ImportContext` (positioned on the node) and the
``onnx.NodeProto``, and returns the lowerkit values of the node's outputs in order
(``None`` for outputs it binds itself or that are not requested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import FormatError
from ..ir import Value
from ._importer import ImportContext
from ._registry import importer

_FLOATS = ("f16", "f32", "f64")


def _axis(ctx: ImportContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise FormatError(f"{ctx.where()}: {what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# -- element-wise -------------------------------------------------------------------------------
_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "neg"}


@importer(*_UNARY)
def import_unary(ctx: ImportContext, node) -> list[Value]:
    return [ctx.emit(_UNARY[node.op_type], [ctx.input(0)])]


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


@importer(*_BINARY)
def import_binary(ctx: ImportContext, node) -> list[Value]:
    a, b = ctx.input(0), ctx.input(1)
    if node.op_type == "Div" and a.type.dtype not in _FLOATS:
        raise ctx.unsupported(
            f"integer Div ({a.type.dtype}) truncates in ONNX; lowerkit's div is true division"
        )
    return [ctx.emit(_BINARY[node.op_type], [a, b])]


@importer("LeakyRelu")
def import_leaky_relu(ctx: ImportContext, node) -> list[Value]:
    alpha = ctx.attrs().get("alpha", 0.01)
    return [ctx.emit("leaky_relu", [ctx.input(0)], {"negative_slope": float(alpha)})]


@importer("Clip", constant_inputs=(1, 2))
def import_clip(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    attrs = ctx.attrs()
    if ctx.opset < 11:
        low, high = attrs.get("min", -math.inf), attrs.get("max", math.inf)
    else:
        lo = ctx.constant_input(1, "Clip min")
        hi = ctx.constant_input(2, "Clip max")
        low = -math.inf if lo is None else float(np.asarray(lo).reshape(()))
        high = math.inf if hi is None else float(np.asarray(hi).reshape(()))
    return [ctx.emit("clip", [x], {"min": float(low), "max": float(high)})]


# -- convolution and pooling ---------------------------------------------------------------------
def _spatial_pads(
    ctx: ImportContext,
    attrs: dict,
    in_size: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> tuple[int, int, int, int]:
    """ONNX ``auto_pad``/``pads`` as lowerkit's ``[top, left, bottom, right]``."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise FormatError(f"{ctx.where()}: pads must have 4 entries for 2-D, got {list(pads)}")
        return pads  # type: ignore[return-value]
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise FormatError(f"{ctx.where()}: unknown auto_pad {auto_pad!r}")
    begin, end = [], []
    for size, k, s, d in zip(in_size, kernel, stride, dilation):
        out = -(-size // s)  # SAME keeps ceil(size / stride) outputs
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        # SAME_UPPER puts the odd extra pad at the end, SAME_LOWER at the beginning.
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


def _lift_1d(ctx: ImportContext, x: Value, attrs: dict) -> tuple[Value, dict, bool]:
    """A 1-D (NCL) input as 2-D (N, C, 1, L) with matching attributes; 2-D passes through."""
    if x.type.rank == 4:
        return x, attrs, False
    if x.type.rank != 3:
        raise ctx.unsupported(
            f"only 1-D (NCL) and 2-D (NCHW) inputs are supported, got rank {x.type.rank} ({x.type})"
        )
    n, c, length = x.type.shape
    lifted = ctx.emit("reshape", [x], {"shape": (n, c, 1, length)})
    attrs = dict(attrs)
    for key in ("kernel_shape", "strides", "dilations"):
        if key in attrs:
            attrs[key] = [1, *attrs[key]]
    if "pads" in attrs:
        pads = list(attrs["pads"])
        if len(pads) != 2:
            raise FormatError(f"{ctx.where()}: pads must have 2 entries for 1-D, got {pads}")
        attrs["pads"] = [0, pads[0], 0, pads[1]]
    return lifted, attrs, True


def _drop_1d(ctx: ImportContext, y: Value) -> Value:
    n, c, _, length = y.type.shape
    return ctx.emit("reshape", [y], {"shape": (n, c, length)})


def _pair(ctx: ImportContext, attrs: dict, name: str, default: Sequence[int]) -> tuple[int, int]:
    value = tuple(int(v) for v in attrs.get(name, default))
    if len(value) != 2:
        raise FormatError(f"{ctx.where()}: {name} must have 2 entries for 2-D, got {list(value)}")
    return value  # type: ignore[return-value]


@importer("Conv")
def import_conv(ctx: ImportContext, node) -> list[Value]:
    x, weight, bias = ctx.input(0), ctx.input(1), ctx.optional_input(2)
    x, attrs, lifted = _lift_1d(ctx, x, ctx.attrs())
    if lifted:
        oc, icg, k = weight.type.shape
        weight = ctx.emit("reshape", [weight], {"shape": (oc, icg, 1, k)})
    kernel = _pair(ctx, attrs, "kernel_shape", weight.type.shape[2:])
    if kernel != tuple(weight.type.shape[2:]):
        raise FormatError(f"{ctx.where()}: kernel_shape {list(kernel)} differs from the weight's {weight.type}")
    stride = _pair(ctx, attrs, "strides", (1, 1))
    dilation = _pair(ctx, attrs, "dilations", (1, 1))
    padding = _spatial_pads(ctx, attrs, x.type.shape[2:], kernel, stride, dilation)
    inputs = [x, weight] + ([bias] if bias is not None else [])
    y = ctx.emit("conv2d", inputs, {"stride": stride, "padding": padding, "dilation": dilation,
                                    "groups": int(attrs.get("group", 1))})
    return [_drop_1d(ctx, y) if lifted else y]


def _pool_geometry(ctx: ImportContext, x: Value, attrs: dict) -> dict:
    if "kernel_shape" not in attrs:
        raise FormatError(f"{ctx.where()}: kernel_shape is required")
    kernel = _pair(ctx, attrs, "kernel_shape", ())
    stride = _pair(ctx, attrs, "strides", (1, 1))
    dilation = _pair(ctx, attrs, "dilations", (1, 1))
    padding = _spatial_pads(ctx, attrs, x.type.shape[2:], kernel, stride, dilation)
    return {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation,
            "ceil_mode": bool(attrs.get("ceil_mode", 0))}


@importer("MaxPool")
def import_max_pool(ctx: ImportContext, node) -> list[Value]:
    if ctx.output_requested(1):
        raise ctx.unsupported("the Indices output of MaxPool is not supported")
    x, attrs, lifted = _lift_1d(ctx, ctx.input(0), ctx.attrs())
    y = ctx.emit("max_pool2d", [x], _pool_geometry(ctx, x, attrs))
    return [_drop_1d(ctx, y) if lifted else y]


@importer("AveragePool")
def import_avg_pool(ctx: ImportContext, node) -> list[Value]:
    x, attrs, lifted = _lift_1d(ctx, ctx.input(0), ctx.attrs())
    geometry = _pool_geometry(ctx, x, attrs)
    if geometry.pop("dilation") != (1, 1):
        raise ctx.unsupported("AveragePool with dilations is not supported (avg_pool2d has none)")
    # ONNX's count_include_pad defaults to 0, torch's (and lowerkit's) to True.
    geometry["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
    y = ctx.emit("avg_pool2d", [x], geometry)
    return [_drop_1d(ctx, y) if lifted else y]


@importer("GlobalAveragePool")
def import_global_avg_pool(ctx: ImportContext, node) -> list[Value]:
    x, _, lifted = _lift_1d(ctx, ctx.input(0), {})
    y = ctx.emit("global_avg_pool2d", [x])
    return [_drop_1d(ctx, y) if lifted else y]


@importer("BatchNormalization")
def import_batch_norm(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    if attrs.get("training_mode", 0) or any(ctx.output_requested(i) for i in (1, 2, 3, 4)):
        raise ctx.unsupported("training-mode BatchNormalization (batch statistics) is not supported")
    if not attrs.get("spatial", 1):
        raise ctx.unsupported("BatchNormalization with spatial=0 is not supported")
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    eps = float(attrs.get("epsilon", 1e-5))
    return [ctx.emit("batch_norm", [x, mean, var, scale, bias], {"eps": eps})]


# -- linear algebra -------------------------------------------------------------------------------
@importer("MatMul")
def import_matmul(ctx: ImportContext, node) -> list[Value]:
    return [ctx.emit("matmul", [ctx.input(0), ctx.input(1)])]


def _scale(ctx: ImportContext, v: Value, factor: float) -> Value:
    if factor == 1.0:
        return v
    return ctx.emit("mul", [v, ctx.emit_constant(np.array(factor, dtype=v.type.numpy_dtype))])


@importer("Gemm")
def import_gemm(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    trans_a, trans_b = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional_input(2)
    if trans_a:
        a = ctx.emit("transpose", [a], {"perm": (1, 0)})
    n_out = b.type.shape[0] if trans_b else b.type.shape[1]
    # The common case (torch.nn.Linear) is exactly lowerkit's linear: x @ W^T + bias.
    if trans_b and alpha == 1.0 and beta == 1.0 and (c is None or c.type.shape == (n_out,)):
        return [ctx.emit("linear", [a, b] + ([c] if c is not None else []))]
    if trans_b:
        b = ctx.emit("transpose", [b], {"perm": (1, 0)})
    y = _scale(ctx, ctx.emit("matmul", [a, b]), alpha)
    if c is not None and beta != 0.0:
        y = ctx.emit("add", [y, _scale(ctx, c, beta)])
    return [y]


# -- shapes ----------------------------------------------------------------------------------------
@importer("Flatten")
def import_flatten(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    shape = x.type.shape
    axis = ctx.attrs().get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise FormatError(f"{ctx.where()}: axis {axis} is out of range for rank {len(shape)}")
    if axis == 1 and len(shape) >= 2:
        return [ctx.emit("flatten", [x], {"start_dim": 1, "end_dim": -1})]
    target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    return [ctx.emit("reshape", [x], {"shape": target})]


@importer("Reshape", constant_inputs=(1,))
def import_reshape(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    attrs = ctx.attrs()
    shape = ctx.constant_input(1, "the target shape") if ctx.opset >= 5 else attrs.get("shape")
    if shape is None:
        raise FormatError(f"{ctx.where()}: Reshape needs a shape")
    allow_zero = bool(attrs.get("allowzero", 0))
    target = []
    for i, d in enumerate(int(d) for d in np.asarray(shape).reshape(-1)):
        if d == 0 and not allow_zero:  # ONNX: 0 copies the input dim
            if i >= x.type.rank:
                raise FormatError(f"{ctx.where()}: shape entry {i} is 0 but the input has rank {x.type.rank}")
            d = x.type.shape[i]
        target.append(d)
    return [ctx.emit("reshape", [x], {"shape": tuple(target)})]


def _raw_axes(ctx: ImportContext) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an input from opset 13, an attribute before; None if absent."""
    axes = ctx.constant_input(1, "the axes") if ctx.opset >= 13 else ctx.attrs().get("axes")
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


@importer("Unsqueeze", constant_inputs=(1,))
def import_unsqueeze(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    raw = _raw_axes(ctx)
    if not raw:
        raise FormatError(f"{ctx.where()}: Unsqueeze needs axes")
    rank = x.type.rank + len(raw)
    axes = {_axis(ctx, a, rank) for a in raw}
    if len(axes) != len(raw):
        raise FormatError(f"{ctx.where()}: Unsqueeze axes {raw} repeat an axis")
    dims = iter(x.type.shape)
    shape = tuple(1 if i in axes else next(dims) for i in range(rank))
    return [ctx.emit("reshape", [x], {"shape": shape})]


@importer("Squeeze", constant_inputs=(1,))
def import_squeeze(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    raw = _raw_axes(ctx)
    if raw is None:
        axes = {i for i, d in enumerate(x.type.shape) if d == 1}
    else:
        axes = {_axis(ctx, a, x.type.rank) for a in raw}
    if any(x.type.shape[a] != 1 for a in axes):
        raise FormatError(f"{ctx.where()}: Squeeze axes {sorted(axes)} of {x.type} are not all of size 1")
    shape = tuple(d for i, d in enumerate(x.type.shape) if i not in axes)
    return [ctx.emit("reshape", [x], {"shape": shape})]


@importer("Transpose")
def import_transpose(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    perm = ctx.attrs().get("perm", list(reversed(range(x.type.rank))))
    return [ctx.emit("transpose", [x], {"perm": tuple(int(p) for p in perm)})]


@importer("Concat")
def import_concat(ctx: ImportContext, node) -> list[Value]:
    xs = ctx.inputs()
    axis = _axis(ctx, int(ctx.attrs()["axis"]), xs[0].type.rank)
    return [ctx.emit("concat", xs, {"dim": axis})]


def _softmax(ctx: ImportContext, op: str) -> list[Value]:
    x = ctx.input(0)
    rank = x.type.rank
    if ctx.opset >= 13:
        axis = _axis(ctx, int(ctx.attrs().get("axis", -1)), rank)
        return [ctx.emit(op, [x], {"dim": axis})]
    # Before opset 13 the input is coerced to 2-D [prod(:axis), prod(axis:)] and normalised
    # over the second dim, i.e. jointly over every dim from axis on.
    axis = _axis(ctx, int(ctx.attrs().get("axis", 1)), rank)
    if axis == rank - 1:
        return [ctx.emit(op, [x], {"dim": axis})]
    shape = x.type.shape
    flat = ctx.emit("reshape", [x], {"shape": (math.prod(shape[:axis]), math.prod(shape[axis:]))})
    y = ctx.emit(op, [flat], {"dim": 1})
    return [ctx.emit("reshape", [y], {"shape": tuple(shape)})]


@importer("Softmax")
def import_softmax(ctx: ImportContext, node) -> list[Value]:
    return _softmax(ctx, "softmax")


@importer("LogSoftmax")
def import_log_softmax(ctx: ImportContext, node) -> list[Value]:
    return _softmax(ctx, "log_softmax")


# -- constants and pass-throughs -----------------------------------------------------------------
_CONSTANT_ATTRS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


@importer("Constant")
def import_constant(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    if "value" in attrs:
        array = np.asarray(attrs["value"])
    else:
        kinds = [k for k in attrs if k in _CONSTANT_ATTRS]
        if not kinds:
            raise ctx.unsupported(f"Constant with attribute(s) {sorted(attrs)} is not supported")
        array = np.asarray(attrs[kinds[0]], dtype=_CONSTANT_ATTRS[kinds[0]])
    ctx.add_known(node.output[0], array, initializer=False)
    return [None]


@importer("Identity")
def import_identity(ctx: ImportContext, node) -> list[Value]:
    if not ctx.has_input(0):
        raise FormatError(f"{ctx.where()} has no input")
    ctx.alias(node.output[0], node.input[0])
    return [None]


@importer("Dropout", constant_inputs=(1, 2))
def import_dropout(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    training = ctx.constant_input(2, "Dropout training_mode") if ctx.opset >= 12 else None
    ratio = ctx.constant_input(1, "Dropout ratio") if ctx.opset >= 12 else None
    dropping = ratio is None or float(np.asarray(ratio).reshape(())) != 0.0
    if training is not None and bool(np.asarray(training).reshape(())) and dropping:
        raise ctx.unsupported("training-mode Dropout is not supported (inference only)")
    if ctx.opset < 7 and not attrs.get("is_test", 0):
        raise ctx.unsupported("Dropout with is_test=0 is not supported (inference only)")
    ctx.alias(node.output[0], node.input[0])
    if ctx.output_requested(1):  # in inference the mask keeps everything
        x = ctx.input(0)
        mask = ctx.emit_constant(np.ones(x.type.shape, dtype=np.bool_), hint="mask")
        return [None, mask]
    return [None]


# The ops of mobile CNNs and transformers register from their own module.
from . import _import_model_ops  # noqa: E402,F401
