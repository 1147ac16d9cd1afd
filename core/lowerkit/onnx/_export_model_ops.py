"""Exporters for the ops of mobile CNNs and transformers (registered like ``_export_ops``).

Where an ONNX op arrived after opset 13 (HardSwish 14, LayerNormalization 17, Gelu 20,
GroupNormalization's per-channel form 21), older opsets get an equivalent chain of basic ops.
``scaled_dot_product_attention`` is always written as its core decomposition.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node
from ..opset.decompose import decompose_node
from ._exporter import ExportContext
from ._registry import exporter

_SIMPLE = {"erf": "Erf", "pow": "Pow", "where": "Where"}


def _ints(ctx: ExportContext, values, hint: str) -> str:
    return ctx.initializer(np.array(list(values), dtype=np.int64), hint)


def _scalar(ctx: ExportContext, node: Node, value: float, hint: str) -> str:
    return ctx.initializer(np.array(value, dtype=node.inputs[0].type.numpy_dtype), hint)


def _tmp(ctx: ExportContext, node: Node, hint: str) -> str:
    return ctx.fresh(f"{node.output.name}_{hint}")


@exporter(*_SIMPLE)
def export_simple(ctx: ExportContext, node: Node) -> None:
    ctx.add_node(_SIMPLE[node.op], [ctx.name(v) for v in node.inputs], [ctx.output()])


@exporter("cast")
def export_cast(ctx: ExportContext, node: Node) -> None:
    from ._types import DTYPE_TO_ONNX

    ctx.add_node("Cast", [ctx.name(node.inputs[0])], [ctx.output()], to=int(DTYPE_TO_ONNX[node.attrs["dtype"]]))


# -- activations ------------------------------------------------------------------------------------
@exporter("hardsigmoid")
def export_hardsigmoid(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("HardSigmoid", [ctx.name(node.inputs[0])], [ctx.output()],
                 alpha=float(node.attrs["alpha"]), beta=float(node.attrs["beta"]))


@exporter("hardswish")
def export_hardswish(ctx: ExportContext, node: Node) -> None:
    x = ctx.name(node.inputs[0])
    if ctx.opset >= 14:
        ctx.add_node("HardSwish", [x], [ctx.output()])
        return
    gate = _tmp(ctx, node, "gate")
    ctx.add_node("HardSigmoid", [x], [gate], alpha=1 / 6, beta=0.5)
    ctx.add_node("Mul", [x, gate], [ctx.output()])


@exporter("silu")
def export_silu(ctx: ExportContext, node: Node) -> None:
    x = ctx.name(node.inputs[0])
    gate = _tmp(ctx, node, "sigmoid")
    ctx.add_node("Sigmoid", [x], [gate])
    ctx.add_node("Mul", [x, gate], [ctx.output()])


@exporter("gelu")
def export_gelu(ctx: ExportContext, node: Node) -> None:
    x = ctx.name(node.inputs[0])
    approximate = node.attrs["approximate"]
    if ctx.opset >= 20:
        ctx.add_node("Gelu", [x], [ctx.output()], approximate=approximate)
        return
    if approximate == "tanh":  # tanh(sqrt(2/pi) * (x + 0.044715 x^3))
        cube = _tmp(ctx, node, "cube")
        ctx.add_node("Pow", [x, _scalar(ctx, node, 3.0, "three")], [cube])
        scaled = _tmp(ctx, node, "cube_scaled")
        ctx.add_node("Mul", [cube, _scalar(ctx, node, 0.044715, "gelu_c")], [scaled])
        inner = _tmp(ctx, node, "inner")
        ctx.add_node("Add", [x, scaled], [inner])
        arg = _tmp(ctx, node, "arg")
        ctx.add_node("Mul", [inner, _scalar(ctx, node, math.sqrt(2 / math.pi), "sqrt_2_pi")], [arg])
        phi = _tmp(ctx, node, "tanh")
        ctx.add_node("Tanh", [arg], [phi])
    else:  # erf(x / sqrt(2))
        arg = _tmp(ctx, node, "arg")
        ctx.add_node("Mul", [x, _scalar(ctx, node, 1 / math.sqrt(2), "inv_sqrt2")], [arg])
        phi = _tmp(ctx, node, "erf")
        ctx.add_node("Erf", [arg], [phi])
    one_plus = _tmp(ctx, node, "one_plus")
    ctx.add_node("Add", [phi, _scalar(ctx, node, 1.0, "one")], [one_plus])
    half_x = _tmp(ctx, node, "half_x")
    ctx.add_node("Mul", [x, _scalar(ctx, node, 0.5, "half")], [half_x])
    ctx.add_node("Mul", [half_x, one_plus], [ctx.output()])


# -- reductions -----------------------------------------------------------------------------------------
_REDUCTIONS = {"reduce_mean": "ReduceMean", "reduce_sum": "ReduceSum", "reduce_max": "ReduceMax",
               "reduce_min": "ReduceMin"}


def _reduce(ctx: ExportContext, op_type: str, source: str, axes, keepdims: bool, output: str) -> None:
    if ctx.opset >= 18 or op_type == "ReduceSum":
        ctx.add_node(op_type, [source, _ints(ctx, axes, "axes")], [output], keepdims=int(keepdims))
    else:
        ctx.add_node(op_type, [source], [output], axes=list(axes), keepdims=int(keepdims))


@exporter(*_REDUCTIONS)
def export_reduce(ctx: ExportContext, node: Node) -> None:
    x = node.inputs[0]
    dims = node.attrs["dims"] or range(x.type.rank)
    axes = sorted(int(d) % x.type.rank for d in dims)
    _reduce(ctx, _REDUCTIONS[node.op], ctx.name(x), axes, bool(node.attrs["keepdim"]), ctx.output())


# -- normalisation ----------------------------------------------------------------------------------------
def _normalize(ctx: ExportContext, node: Node, source: str, axes, eps: float, output: str) -> None:
    """(x - mean) / sqrt(var + eps) over ``axes`` with basic ops."""
    mean = _tmp(ctx, node, "mean")
    _reduce(ctx, "ReduceMean", source, axes, True, mean)
    centered = _tmp(ctx, node, "centered")
    ctx.add_node("Sub", [source, mean], [centered])
    square = _tmp(ctx, node, "square")
    ctx.add_node("Mul", [centered, centered], [square])
    var = _tmp(ctx, node, "var")
    _reduce(ctx, "ReduceMean", square, axes, True, var)
    shifted = _tmp(ctx, node, "var_eps")
    ctx.add_node("Add", [var, _scalar(ctx, node, eps, "eps")], [shifted])
    std = _tmp(ctx, node, "std")
    ctx.add_node("Sqrt", [shifted], [std])
    ctx.add_node("Div", [centered, std], [output])


def _affine(ctx: ExportContext, node: Node, source: str, shape: tuple[int, ...] | None) -> None:
    """Multiply by the weight and add the bias (reshaped to ``shape`` if given), into the output."""
    names = [ctx.name(v) for v in node.inputs[1:]]
    if shape is not None:
        reshaped = []
        for name in names:
            r = ctx.fresh(f"{name}_bcast")
            ctx.add_node("Reshape", [name, _ints(ctx, shape, "affine_shape")], [r])
            reshaped.append(r)
        names = reshaped
    if not names:
        ctx.add_node("Identity", [source], [ctx.output()])
        return
    if len(names) == 1:
        ctx.add_node("Mul", [source, names[0]], [ctx.output()])
        return
    scaled = _tmp(ctx, node, "scaled")
    ctx.add_node("Mul", [source, names[0]], [scaled])
    ctx.add_node("Add", [scaled, names[1]], [ctx.output()])


@exporter("layer_norm")
def export_layer_norm(ctx: ExportContext, node: Node) -> None:
    x = node.inputs[0]
    axis = int(node.attrs["axis"]) % x.type.rank
    eps = float(node.attrs["eps"])
    if ctx.opset >= 17:
        names = [ctx.name(v) for v in node.inputs]
        if len(names) == 1:  # LayerNormalization's Scale is required
            names.append(ctx.initializer(np.ones(x.type.shape[axis:], x.type.numpy_dtype), "ln_scale"))
        ctx.add_node("LayerNormalization", names, [ctx.output()], axis=axis, epsilon=eps)
        return
    normalized = _tmp(ctx, node, "normalized")
    _normalize(ctx, node, ctx.name(x), range(axis, x.type.rank), eps, normalized)
    _affine(ctx, node, normalized, None)


@exporter("group_norm")
def export_group_norm(ctx: ExportContext, node: Node) -> None:
    x = node.inputs[0]
    shape = x.type.shape
    groups, eps = int(node.attrs["num_groups"]), float(node.attrs["eps"])
    if ctx.opset >= 21 and len(node.inputs) == 3:
        ctx.add_node("GroupNormalization", [ctx.name(v) for v in node.inputs], [ctx.output()],
                     num_groups=groups, epsilon=eps)
        return
    grouped = _tmp(ctx, node, "grouped")
    ctx.add_node("Reshape", [ctx.name(x), _ints(ctx, (shape[0], groups, -1), "group_shape")], [grouped])
    normalized = _tmp(ctx, node, "normalized")
    _normalize(ctx, node, grouped, [2], eps, normalized)
    back = _tmp(ctx, node, "ungrouped")
    ctx.add_node("Reshape", [normalized, _ints(ctx, shape, "x_shape")], [back])
    _affine(ctx, node, back, (shape[1],) + (1,) * (len(shape) - 2))


# -- selecting and arranging ------------------------------------------------------------------------------
@exporter("slice")
def export_slice(ctx: ExportContext, node: Node) -> None:
    a = node.attrs
    inputs = [ctx.name(node.inputs[0])] + [_ints(ctx, a[k], f"slice_{k}") for k in ("starts", "ends", "axes", "steps")]
    ctx.add_node("Slice", inputs, [ctx.output()])


@exporter("split")
def export_split(ctx: ExportContext, node: Node) -> None:
    outputs = [ctx.output(i) for i in range(len(node.outputs))]
    ctx.add_node("Split", [ctx.name(node.inputs[0]), _ints(ctx, node.attrs["sizes"], "split_sizes")], outputs,
                 axis=int(node.attrs["dim"]))


@exporter("gather")
def export_gather(ctx: ExportContext, node: Node) -> None:
    indices = ctx.initializer(np.asarray(node.attrs["indices"], dtype=np.int64), "indices")
    ctx.add_node("Gather", [ctx.name(node.inputs[0]), indices], [ctx.output()], axis=int(node.attrs["dim"]))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


@exporter("pad")
def export_pad(ctx: ExportContext, node: Node) -> None:
    inputs = [ctx.name(node.inputs[0]), _ints(ctx, node.attrs["pads"], "pads")]
    if node.attrs["mode"] == "constant":
        inputs.append(_scalar(ctx, node, float(node.attrs["value"]), "pad_value"))
    ctx.add_node("Pad", inputs, [ctx.output()], mode=_PAD_MODES[node.attrs["mode"]])


@exporter("expand")
def export_expand(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("Expand", [ctx.name(node.inputs[0]), _ints(ctx, node.attrs["shape"], "expand_shape")],
                 [ctx.output()])


# -- resizing, attention, transposed convolution ---------------------------------------------------------------
@exporter("interpolate")
def export_interpolate(ctx: ExportContext, node: Node) -> None:
    a = node.attrs
    x = node.inputs[0]
    in_spatial = x.type.shape[2:]
    scales = [float(np.float32(s)) for s in a["scales"]]
    # Scales carry the coordinate mapping exactly when they also give the output size.
    # (checked in float32, as ONNX Runtime computes, and in double, as onnx's shape inference does).
    if all(math.floor(np.float32(i) * np.float32(s)) == o == math.floor(i * s)
           for i, s, o in zip(in_spatial, scales, a["size"])):
        extra = [ctx.initializer(np.array([1.0, 1.0] + scales, np.float32), "scales")]
    else:
        extra = ["", _ints(ctx, list(x.type.shape[:2]) + list(a["size"]), "sizes")]
    ctx.add_node("Resize", [ctx.name(x), ""] + extra, [ctx.output()], mode=a["mode"],
                 coordinate_transformation_mode=a["coordinate_transformation_mode"],
                 nearest_mode=a["nearest_mode"])


@exporter("scaled_dot_product_attention")
def export_sdpa(ctx: ExportContext, node: Node) -> None:
    graph = Graph()
    inputs = [graph.add_input(v.name, v.type) for v in node.inputs]
    copy = graph.add_node(node.op, inputs, [node.output.type], dict(node.attrs), output_hints=[node.output.name],
                          debug_handle=node.debug_handle, scope=node.scope, source=node.source)
    graph.set_outputs(copy.outputs)
    decompose_node(graph, copy)
    (result,) = ctx.emit_graph(ctx.module, graph, [ctx.name(v) for v in node.inputs], ctx.prefix)
    ctx.bind(node.output, result)


@exporter("conv_transpose2d")
def export_conv_transpose2d(ctx: ExportContext, node: Node) -> None:
    a = node.attrs
    ctx.add_node(
        "ConvTranspose", [ctx.name(v) for v in node.inputs], [ctx.output()],
        kernel_shape=list(node.inputs[1].type.shape[2:]), strides=list(a["stride"]), pads=list(a["padding"]),
        output_padding=list(a["output_padding"]), dilations=list(a["dilation"]), group=int(a["groups"]),
    )
