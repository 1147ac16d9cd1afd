"""Importers for the ONNX ops of mobile CNNs and transformers (registered like ``_import_ops``).

Slice, Split, Gather, Pad, Expand and Resize read their index/shape inputs as compile-time
constants (they are, once lowerkit fixes the input shapes and folds shape arithmetic).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import FormatError
from ..ir import Value
from ._import_ops import _axis, _drop_1d, _lift_1d, _pair
from ._importer import ImportContext
from ._registry import importer

_INT64_MAX = 2**63 - 1


def _ints(array) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _alias(ctx: ImportContext, node) -> list[Value | None]:
    ctx.alias(node.output[0], node.input[0])
    return [None]


# -- activations and element-wise ----------------------------------------------------------------
@importer("HardSigmoid")
def import_hardsigmoid(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()  # ONNX's defaults (0.2, 0.5) differ from torch's (1/6, 0.5)
    return [ctx.emit("hardsigmoid", [ctx.input(0)],
                     {"alpha": float(attrs.get("alpha", 0.2)), "beta": float(attrs.get("beta", 0.5))})]


_UNARY = {"HardSwish": "hardswish", "Erf": "erf"}


@importer(*_UNARY)
def import_model_unary(ctx: ImportContext, node) -> list[Value]:
    return [ctx.emit(_UNARY[node.op_type], [ctx.input(0)])]


@importer("Gelu")
def import_gelu(ctx: ImportContext, node) -> list[Value]:
    return [ctx.emit("gelu", [ctx.input(0)], {"approximate": ctx.attrs().get("approximate", "none")})]


@importer("Pow", constant_inputs=())
def import_pow(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    name = node.input[1]
    if ctx.is_known(name) and not ctx.is_weight(name):
        # ONNX allows an exponent of another dtype; lowerkit's pow takes one dtype.
        exponent = ctx.emit_constant(ctx.known_array(name).astype(x.type.numpy_dtype), hint="exponent")
    else:
        exponent = ctx.input(1)
    return [ctx.emit("pow", [x, exponent])]


@importer("Where")
def import_where(ctx: ImportContext, node) -> list[Value]:
    return [ctx.emit("where", [ctx.input(0), ctx.input(1), ctx.input(2)])]


@importer("Cast")
def import_cast(ctx: ImportContext, node) -> list[Value | None]:
    from ._types import ONNX_TO_DTYPE, onnx_type_name

    x = ctx.input(0)
    to = int(ctx.attrs()["to"])
    target = ONNX_TO_DTYPE.get(to)
    if target is None:
        raise ctx.unsupported(f"Cast to {onnx_type_name(to)}, a dtype lowerkit lacks")
    if target == x.type.dtype:
        return _alias(ctx, node)
    return [ctx.emit("cast", [x], {"dtype": target})]


# -- reductions ------------------------------------------------------------------------------------
_REDUCTIONS = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
               "ReduceMin": "reduce_min"}


@importer(*_REDUCTIONS, constant_inputs=(1,))
def import_reduce(ctx: ImportContext, node) -> list[Value | None]:
    x = ctx.input(0)
    attrs = ctx.attrs()
    axes_input = ctx.opset >= 18 or (node.op_type == "ReduceSum" and ctx.opset >= 13)
    raw = ctx.constant_input(1, "the axes") if axes_input else attrs.get("axes")
    axes = [] if raw is None else _ints(raw)
    if (not axes and attrs.get("noop_with_empty_axes", 0)) or x.type.rank == 0:
        return _alias(ctx, node)
    dims = tuple(sorted({_axis(ctx, a, x.type.rank, "axes entry") for a in axes}))
    return [ctx.emit(_REDUCTIONS[node.op_type], [x], {"dims": dims, "keepdim": bool(attrs.get("keepdims", 1))})]


# -- normalisation -----------------------------------------------------------------------------------
def _layer_norm_statistics(ctx: ImportContext, x: Value, axis: int, eps: float) -> tuple[Value, Value]:
    """LayerNormalization's optional Mean and InvStdDev outputs (kept dims), with basic ops."""
    dims = tuple(range(axis, x.type.rank))
    mean = ctx.emit("reduce_mean", [x], {"dims": dims, "keepdim": True}, hint="mean")
    centered = ctx.emit("sub", [x, mean])
    var = ctx.emit("reduce_mean", [ctx.emit("mul", [centered, centered])], {"dims": dims, "keepdim": True})
    std = ctx.emit("sqrt", [ctx.emit("add", [var, ctx.emit_constant(np.array(eps, x.type.numpy_dtype))])])
    return mean, ctx.emit("div", [ctx.emit_constant(np.array(1, x.type.numpy_dtype)), std], hint="inv_std_dev")


@importer("LayerNormalization")
def import_layer_norm(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    x = ctx.input(0)
    axis = _axis(ctx, int(attrs.get("axis", -1)), x.type.rank)
    normalized = x.type.shape[axis:]
    affine = []
    for i in (1, 2):
        v = ctx.optional_input(i)
        if v is not None and v.type.shape != normalized:  # ONNX lets them broadcast
            v = ctx.emit("expand", [v], {"shape": normalized})
        if v is not None:
            affine.append(v)
    eps = float(attrs.get("epsilon", 1e-5))
    y = ctx.emit("layer_norm", [x] + affine, {"axis": axis, "eps": eps})
    if ctx.output_requested(1) or ctx.output_requested(2):
        return [y, *_layer_norm_statistics(ctx, x, axis, eps)]
    return [y]


@importer("GroupNormalization")
def import_group_norm(ctx: ImportContext, node) -> list[Value]:
    attrs = ctx.attrs()
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = int(attrs["num_groups"])
    channels = x.type.shape[1]
    if scale.type.shape == (groups,) and groups != channels:
        # Opset 18 gives one scale and bias per group: repeat them for each channel.
        per_channel = np.repeat(np.arange(groups, dtype=np.int64), channels // groups)
        scale = ctx.emit("gather", [scale], {"dim": 0, "indices": per_channel})
        bias = ctx.emit("gather", [bias], {"dim": 0, "indices": per_channel})
    return [ctx.emit("group_norm", [x, scale, bias], {"num_groups": groups, "eps": float(attrs.get("epsilon", 1e-5))})]


@importer("InstanceNormalization")
def import_instance_norm(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    attrs = {"num_groups": x.type.shape[1], "eps": float(ctx.attrs().get("epsilon", 1e-5))}
    return [ctx.emit("group_norm", [x, ctx.input(1), ctx.input(2)], attrs)]


# -- selecting and arranging ------------------------------------------------------------------------
@importer("Slice", constant_inputs=(1, 2, 3, 4))
def import_slice(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    if ctx.opset < 10:
        attrs = ctx.attrs()
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = _ints(ctx.constant_input(1, "Slice starts"))
        ends = _ints(ctx.constant_input(2, "Slice ends"))
        raw_axes, raw_steps = ctx.constant_input(3, "Slice axes"), ctx.constant_input(4, "Slice steps")
        axes = list(range(len(starts))) if raw_axes is None else _ints(raw_axes)
        steps = [1] * len(starts) if raw_steps is None else _ints(raw_steps)
    axes = [_axis(ctx, a, x.type.rank, "axes entry") for a in axes]
    clamp = [max(min(int(v), _INT64_MAX), -_INT64_MAX - 1) for v in ends]
    return [ctx.emit("slice", [x], {"starts": tuple(int(s) for s in starts), "ends": tuple(clamp),
                                     "axes": tuple(axes), "steps": tuple(steps)})]


@importer("Split", constant_inputs=(1,))
def import_split(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    attrs = ctx.attrs()
    axis = _axis(ctx, int(attrs.get("axis", 0)), x.type.rank)
    raw = ctx.constant_input(1, "Split sizes") if ctx.opset >= 13 else attrs.get("split")
    size = x.type.shape[axis]
    if raw is not None and len(_ints(raw)):
        sizes = _ints(raw)
    else:
        parts = int(attrs.get("num_outputs", len(node.output)))
        chunk = -(-size // parts)  # the last part may be smaller
        sizes = [min(chunk, max(size - i * chunk, 0)) for i in range(parts)]
    if len(sizes) != len(node.output):
        raise FormatError(f"{ctx.where()}: Split into {len(sizes)} parts but the node has {len(node.output)} outputs")
    return list(ctx.emit_node("split", [x], {"dim": axis, "sizes": tuple(sizes)}).outputs)


@importer("Gather", constant_inputs=(1,))
def import_gather(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    indices = np.asarray(ctx.constant_input(1, "Gather indices")).astype(np.int64)
    axis = _axis(ctx, int(ctx.attrs().get("axis", 0)), x.type.rank)
    return [ctx.emit("gather", [x], {"dim": axis, "indices": indices})]


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


@importer("Pad", constant_inputs=(1, 2, 3))
def import_pad(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    rank = x.type.rank
    attrs = ctx.attrs()
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise ctx.unsupported(f"Pad mode {mode!r} is not supported (constant, reflect and edge are)")
    if ctx.opset < 11:
        pads, value, axes = list(attrs["pads"]), float(attrs.get("value", 0.0)), None
    else:
        pads = _ints(ctx.constant_input(1, "Pad pads"))
        raw_value = ctx.constant_input(2, "Pad constant_value")
        value = 0.0 if raw_value is None or np.asarray(raw_value).size == 0 else float(np.asarray(raw_value).reshape(-1)[0])
        raw_axes = ctx.constant_input(3, "Pad axes")
        axes = None if raw_axes is None else [_axis(ctx, a, rank, "axes entry") for a in _ints(raw_axes)]
    if axes is not None:
        if len(pads) != 2 * len(axes):
            raise FormatError(f"{ctx.where()}: Pad has {len(pads)} pads for {len(axes)} axes")
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a], full[a + rank] = pads[i], pads[i + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise FormatError(f"{ctx.where()}: Pad needs {2 * rank} pads for rank {rank}, got {len(pads)}")
    if any(p < 0 for p in pads):  # negative pads crop
        crop = [i for i in range(rank) if pads[i] < 0 or pads[i + rank] < 0]
        starts = tuple(max(-pads[i], 0) for i in crop)
        ends = tuple(x.type.shape[i] - max(-pads[i + rank], 0) for i in crop)
        x = ctx.emit("slice", [x], {"starts": starts, "ends": ends, "axes": tuple(crop), "steps": (1,) * len(crop)})
        pads = [max(p, 0) for p in pads]
    return [ctx.emit("pad", [x], {"pads": tuple(pads), "mode": _PAD_MODES[mode], "value": value})]


@importer("Expand", constant_inputs=(1,))
def import_expand(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    target = tuple(_ints(ctx.constant_input(1, "Expand shape")))
    try:
        shape = tuple(np.broadcast_shapes(x.type.shape, target))
    except ValueError:
        raise FormatError(f"{ctx.where()}: {x.type} does not broadcast with shape {list(target)}") from None
    return [ctx.emit("expand", [x], {"shape": shape})]


# -- resizing and transposed convolution ------------------------------------------------------------
_COORDINATE_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")


@importer("Resize", constant_inputs=(1, 2, 3))
def import_resize(ctx: ImportContext, node) -> list[Value]:
    x = ctx.input(0)
    attrs = ctx.attrs()
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise ctx.unsupported(f"Resize mode {mode!r} is not supported (nearest and linear are)")
    transform = attrs.get("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric")
    if transform not in _COORDINATE_MODES:
        raise ctx.unsupported(f"Resize coordinate_transformation_mode {transform!r} is not supported "
                              f"({', '.join(_COORDINATE_MODES)} are)")
    if attrs.get("antialias", 0):
        raise ctx.unsupported("Resize with antialias is not supported")
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.unsupported("Resize keep_aspect_ratio_policy other than stretch is not supported")
    rank = x.type.rank
    axes = [_axis(ctx, a, rank, "axes entry") for a in attrs.get("axes", range(rank))]
    scales_in = ctx.constant_input(1 if ctx.opset < 11 else 2, "Resize scales")
    sizes_in = None if ctx.opset < 11 else ctx.constant_input(3, "Resize sizes")
    shape = list(x.type.shape)
    scales = [1.0] * rank
    if scales_in is not None and np.asarray(scales_in).size:
        for a, s in zip(axes, np.asarray(scales_in, dtype=np.float64).reshape(-1)):
            scales[a] = float(s)
            shape[a] = int(math.floor(x.type.shape[a] * float(s)))
    elif sizes_in is not None and np.asarray(sizes_in).size:
        for a, s in zip(axes, _ints(sizes_in)):
            shape[a] = s
            scales[a] = s / x.type.shape[a]
    else:
        raise FormatError(f"{ctx.where()}: Resize needs scales or sizes")
    if rank < 3 or shape[:2] != list(x.type.shape[:2]):
        raise ctx.unsupported(f"Resize of {x.type} to {shape}: only the spatial dims (2 and up) may change")
    out = {"size": tuple(shape[2:]), "scales": tuple(scales[2:]), "mode": mode,
           "coordinate_transformation_mode": transform,
           "nearest_mode": attrs.get("nearest_mode", "round_prefer_floor")}
    return [ctx.emit("interpolate", [x], out)]


@importer("ConvTranspose")
def import_conv_transpose(ctx: ImportContext, node) -> list[Value]:
    x, weight, bias = ctx.input(0), ctx.input(1), ctx.optional_input(2)
    x, attrs, lifted = _lift_1d(ctx, x, ctx.attrs())
    if lifted:
        ic, ocg, k = weight.type.shape
        weight = ctx.emit("reshape", [weight], {"shape": (ic, ocg, 1, k)})
        for key in ("output_padding", "output_shape"):
            if key in attrs:
                attrs[key] = [0 if key == "output_padding" else 1, *attrs[key]]
    kernel = _pair(ctx, attrs, "kernel_shape", weight.type.shape[2:])
    stride = _pair(ctx, attrs, "strides", (1, 1))
    dilation = _pair(ctx, attrs, "dilations", (1, 1))
    out_pad = _pair(ctx, attrs, "output_padding", (0, 0))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    in_hw = x.type.shape[2:]
    if "output_shape" in attrs or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = _pair(ctx, attrs, "output_shape", (0, 0))
        if "output_shape" not in attrs:
            wanted = (in_hw[0] * stride[0], in_hw[1] * stride[1])
        begin, end, extra = [], [], list(out_pad)
        for i in range(2):
            total = stride[i] * (in_hw[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilation[i] + 1 - wanted[i]
            if total < 0:  # a larger output than the kernel covers: extra rows/columns at the end
                extra[i], total = extra[i] - total, 0
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        padding = (begin[0], begin[1], end[0], end[1])
        out_pad = (extra[0], extra[1])
    elif auto_pad == "VALID":
        padding = (0, 0, 0, 0)
    else:
        padding = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        if len(padding) != 4:
            raise FormatError(f"{ctx.where()}: pads must have 4 entries for 2-D, got {list(padding)}")
    inputs = [x, weight] + ([bias] if bias is not None else [])
    y = ctx.emit("conv_transpose2d", inputs, {"stride": stride, "padding": padding, "output_padding": out_pad,
                                              "dilation": dilation, "groups": int(attrs.get("group", 1))})
    return [_drop_1d(ctx, y) if lifted else y]
