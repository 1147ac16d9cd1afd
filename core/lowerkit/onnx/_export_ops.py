"""One exporter per lowerkit op: lowerkit node -> ONNX nodes (opset 13 and later).

An exporter gets the :class:`~._exporter.ExportContext` (positioned on the node) and the
lowerkit :class:`~lowerkit.ir.Node`; it reads input names with ``ctx.name``, names its
outputs with ``ctx.output`` and appends ONNX nodes with ``ctx.add_node``.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Node
from ._exporter import ExportContext, resolve_call
from ._registry import exporter

_ELEMENTWISE = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "neg": "Neg", "relu": "Relu",
    "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
    "matmul": "MatMul",
}


@exporter(*_ELEMENTWISE)
def export_elementwise(ctx: ExportContext, node: Node) -> None:
    ctx.add_node(_ELEMENTWISE[node.op], [ctx.name(v) for v in node.inputs], [ctx.output()])


# -- structure ---------------------------------------------------------------------------------------
@exporter("param")
def export_param(ctx: ExportContext, node: Node) -> None:
    ctx.bind(node.output, ctx.parameter(str(node.attrs["name"])))


@exporter("constant")
def export_constant(ctx: ExportContext, node: Node) -> None:
    ctx.bind(node.output, ctx.initializer(node.attrs["value"], ctx.prefix + node.output.name))


@exporter("call")
def export_call(ctx: ExportContext, node: Node) -> None:
    target, graph, sub = resolve_call(ctx.module, node)  # type: ignore[arg-type]
    results = ctx.emit_graph(target, graph, [ctx.name(v) for v in node.inputs], ctx.prefix + sub)
    for value, name in zip(node.outputs, results):
        ctx.bind(value, name)


# -- activations ---------------------------------------------------------------------------------------
def _clip(ctx: ExportContext, node: Node, low: float, high: float) -> None:
    x = node.inputs[0]
    dtype = x.type.numpy_dtype
    bounds = [
        "" if math.isinf(low) else ctx.initializer(np.array(low, dtype=dtype), "clip_min"),
        "" if math.isinf(high) else ctx.initializer(np.array(high, dtype=dtype), "clip_max"),
    ]
    while bounds and bounds[-1] == "":
        bounds.pop()
    ctx.add_node("Clip", [ctx.name(x)] + bounds, [ctx.output()])


@exporter("clip")
def export_clip(ctx: ExportContext, node: Node) -> None:
    _clip(ctx, node, float(node.attrs["min"]), float(node.attrs["max"]))


@exporter("relu6")
def export_relu6(ctx: ExportContext, node: Node) -> None:
    _clip(ctx, node, 0.0, 6.0)


@exporter("leaky_relu")
def export_leaky_relu(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("LeakyRelu", [ctx.name(node.inputs[0])], [ctx.output()],
                 alpha=float(node.attrs["negative_slope"]))


@exporter("softmax", "log_softmax")
def export_softmax(ctx: ExportContext, node: Node) -> None:
    op_type = "Softmax" if node.op == "softmax" else "LogSoftmax"
    ctx.add_node(op_type, [ctx.name(node.inputs[0])], [ctx.output()], axis=int(node.attrs["dim"]))


# -- linear algebra, convolution, pooling, normalisation ---------------------------------------------------
@exporter("linear")
def export_linear(ctx: ExportContext, node: Node) -> None:
    x, weight = node.inputs[0], node.inputs[1]
    names = [ctx.name(v) for v in node.inputs]
    if x.type.rank == 2:
        ctx.add_node("Gemm", names, [ctx.output()], transB=1)
        return
    # Gemm is 2-D only: x @ W^T (+ bias) with MatMul's batch broadcasting.
    w_t = ctx.fresh(f"{names[1]}_t")
    ctx.add_node("Transpose", [names[1]], [w_t], perm=[1, 0])
    if len(names) == 2:
        ctx.add_node("MatMul", [names[0], w_t], [ctx.output()])
        return
    product = ctx.fresh(f"{node.output.name}_matmul")
    ctx.add_node("MatMul", [names[0], w_t], [product])
    ctx.add_node("Add", [product, names[2]], [ctx.output()])


@exporter("conv2d")
def export_conv2d(ctx: ExportContext, node: Node) -> None:
    a = node.attrs
    ctx.add_node(
        "Conv", [ctx.name(v) for v in node.inputs], [ctx.output()],
        kernel_shape=list(node.inputs[1].type.shape[2:]), strides=list(a["stride"]),
        pads=list(a["padding"]), dilations=list(a["dilation"]), group=int(a["groups"]),
    )


def _floor_mode_pads(x_shape, out_shape, attrs) -> list[int]:
    """End pads that make floor-mode pooling produce the ceil-mode output size.

    ONNX's ceil_mode drops a last window that would start in the end padding, as torch and
    lowerkit do, and ONNX Runtime follows it, but onnx's shape inference does not, so a
    ceil-mode pool can fail ``onnx.checker``'s full check. Floor mode with enough end padding
    gives the same windows; the extra padding is never read (max ignores padding, and the
    average counts only input elements, see the callers).
    """
    kernel, stride, dilation = attrs["kernel_size"], attrs["stride"], attrs.get("dilation", (1, 1))
    pads = [int(p) for p in attrs["padding"]]
    for i in range(2):
        extent = dilation[i] * (kernel[i] - 1) + 1
        needed = (out_shape[2 + i] - 1) * stride[i] + extent - x_shape[2 + i] - pads[i]
        pads[2 + i] = max(pads[2 + i], needed)
    return pads


def _fits_onnxruntime(pads: list[int], kernel) -> bool:
    # ONNX Runtime refuses pool pads not smaller than the (undilated) kernel.
    return all(p < kernel[i % 2] for i, p in enumerate(pads))


def _explicit_pad(ctx: ExportContext, node: Node, source: str, pads: list[int], value: float) -> str:
    top, left, bottom, right = pads
    where = ctx.initializer(np.array([0, 0, top, left, 0, 0, bottom, right], np.int64), "pool_pads")
    fill = ctx.initializer(np.array(value, dtype=node.inputs[0].type.numpy_dtype), "pool_pad_value")
    padded = ctx.fresh(f"{node.output.name}_padded")
    ctx.add_node("Pad", [source, where, fill], [padded], mode="constant")
    return padded


@exporter("max_pool2d")
def export_max_pool2d(ctx: ExportContext, node: Node) -> None:
    a = node.attrs
    x = node.inputs[0]
    source = ctx.name(x)
    pads = _floor_mode_pads(x.type.shape, node.output.type.shape, a) if a["ceil_mode"] else list(a["padding"])
    if not _fits_onnxruntime(pads, a["kernel_size"]):
        source, pads = _explicit_pad(ctx, node, source, pads, -np.inf), [0, 0, 0, 0]
    ctx.add_node(
        "MaxPool", [source], [ctx.output()],
        kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]), pads=pads,
        dilations=list(a["dilation"]),
    )


@exporter("avg_pool2d")
def export_avg_pool2d(ctx: ExportContext, node: Node) -> None:
    a = dict(node.attrs)
    x = node.inputs[0]
    source, shape = ctx.name(x), x.type.shape
    count_include_pad = int(a["count_include_pad"])
    if a["ceil_mode"]:
        if count_include_pad and any(a["padding"]):
            # Counting the padding = averaging an explicitly zero-padded input without it.
            top, left, bottom, right = a["padding"]
            source = _explicit_pad(ctx, node, source, list(a["padding"]), 0.0)
            shape = (shape[0], shape[1], shape[2] + top + bottom, shape[3] + left + right)
            a["padding"] = (0, 0, 0, 0)
        # Past the (original) padding a ceil-mode window counts input elements only.
        count_include_pad = 0
        pads = _floor_mode_pads(shape, node.output.type.shape, a)
        if not _fits_onnxruntime(pads, a["kernel_size"]):  # keep ceil mode (stride > kernel)
            ctx.add_node(
                "AveragePool", [source], [ctx.output()], kernel_shape=list(a["kernel_size"]),
                strides=list(a["stride"]), pads=list(a["padding"]), ceil_mode=1, count_include_pad=0,
            )
            return
    else:
        pads = list(a["padding"])
    ctx.add_node(
        "AveragePool", [source], [ctx.output()],
        kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]), pads=pads,
        count_include_pad=count_include_pad,
    )


@exporter("global_avg_pool2d")
def export_global_avg_pool2d(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("GlobalAveragePool", [ctx.name(node.inputs[0])], [ctx.output()])


@exporter("batch_norm")
def export_batch_norm(ctx: ExportContext, node: Node) -> None:
    x, mean, var, weight, bias = (ctx.name(v) for v in node.inputs)
    ctx.add_node("BatchNormalization", [x, weight, bias, mean, var], [ctx.output()],
                 epsilon=float(node.attrs["eps"]))


# -- shapes ----------------------------------------------------------------------------------------------
def _reshape_to_output(ctx: ExportContext, node: Node) -> None:
    shape = np.array(node.output.type.shape, dtype=np.int64)
    target = ctx.initializer(shape, f"{node.output.name}_shape")
    # allowzero: a 0 in the (static) target is a zero-size dim, not ONNX's "copy this dim".
    extra = {"allowzero": 1} if 0 in node.output.type.shape and ctx.opset >= 14 else {}
    ctx.add_node("Reshape", [ctx.name(node.inputs[0]), target], [ctx.output()], **extra)


@exporter("flatten")
def export_flatten(ctx: ExportContext, node: Node) -> None:
    x = node.inputs[0]
    start = int(node.attrs["start_dim"]) % max(x.type.rank, 1)
    end = int(node.attrs["end_dim"]) % max(x.type.rank, 1)
    if start == 1 and end == x.type.rank - 1:
        ctx.add_node("Flatten", [ctx.name(x)], [ctx.output()], axis=1)
    else:
        _reshape_to_output(ctx, node)


@exporter("reshape")
def export_reshape(ctx: ExportContext, node: Node) -> None:
    _reshape_to_output(ctx, node)


@exporter("transpose")
def export_transpose(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("Transpose", [ctx.name(node.inputs[0])], [ctx.output()],
                 perm=[int(p) for p in node.attrs["perm"]])


@exporter("concat")
def export_concat(ctx: ExportContext, node: Node) -> None:
    ctx.add_node("Concat", [ctx.name(v) for v in node.inputs], [ctx.output()], axis=int(node.attrs["dim"]))


# The ops of mobile CNNs and transformers register from their own module.
from . import _export_model_ops  # noqa: E402,F401
