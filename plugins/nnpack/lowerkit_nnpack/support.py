"""Which IR nodes the nnpack backend claims, and why it declines the others."""

from __future__ import annotations

from typing import Any

from lowerkit.backend.hookspecs import Unsupported
from lowerkit.ir.node import Node
from lowerkit.opset import get_schema

from .geometry import ConvGeometry

# NNPACK's activation is ReLU; the others are an extension, fused into the convolution
# producing them (see activations.py).
ACTIVATION_OPS = ("relu", "relu6", "clip", "hardswish", "hardsigmoid", "silu", "gelu", "sigmoid")
# A residual connection (the sum of two tensors of one shape) is an extension too: the
# convolution producing one operand adds the other in its epilogue, before the activation.
RESIDUAL_OPS = ("add",)
# Squeeze-excitation (MobileNetV3, EfficientNet), an extension too: global average pooling,
# then 1x1 convolutions on the pooled [N, C, 1, 1] vector, a sigmoid, and the feature map
# scaled by that gate. Claiming them keeps such a network in one nnpack region instead of
# a region boundary (a call and two copies of the feature map) around every block.
SQUEEZE_OPS = ("global_avg_pool2d", "mul")
# Flattening the pooled features before the classifier: a view, no data moved. Without it a
# CNN's partition had a one-node region of another backend between its last convolution and
# its fully-connected layer (MobileNetV2: three regions, ~0.3 ms of a 5 ms call in the calls
# and copies around them).
VIEW_OPS = ("flatten",)
CLAIMED_OPS = (
    "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "linear", "max_pool2d", "softmax", *ACTIVATION_OPS,
    *RESIDUAL_OPS, *SQUEEZE_OPS, *VIEW_OPS,
)
STRUCTURAL_OPS = ("param", "constant")
MAX_KERNEL = 16


def attrs_of(node: Node) -> dict[str, Any]:
    """The node's attributes with the schema's defaults filled in."""
    try:
        return get_schema(node.op).normalize_attrs(node.attrs)
    except (KeyError, TypeError):
        return dict(node.attrs)


def conv_geometry(node: Node) -> ConvGeometry:
    """The forward-convolution geometry of a conv2d / conv2d_input_grad / conv2d_weight_grad node."""
    attrs = attrs_of(node)
    if node.op == "conv2d":
        n, c, h, w = node.inputs[0].type.shape
        oc, _, kh, kw = node.inputs[1].type.shape
    elif node.op == "conv2d_input_grad":
        n, c, h, w = attrs["input_size"]
        oc, _, kh, kw = node.inputs[0].type.shape
    else:
        n, c, h, w = node.inputs[0].type.shape
        oc, _, kh, kw = attrs["weight_size"]
    return ConvGeometry(
        int(c), int(oc), (int(h), int(w)), (int(kh), int(kw)),
        tuple(attrs["stride"]), tuple(attrs["padding"]),  # type: ignore[arg-type]
    )


def is_depthwise(node: Node) -> bool:
    """A forward depthwise convolution: groups = input channels = output channels (an
    extension: NNPACK has no depthwise convolution)."""
    if node.op != "conv2d":
        return False
    groups = attrs_of(node).get("groups", 1)
    c, oc = node.inputs[0].type.shape[1], node.inputs[1].type.shape[0]
    return groups > 1 and groups == c == oc


def _conv_reason(node: Node) -> str | None:
    attrs = attrs_of(node)
    groups = attrs.get("groups", 1)
    if groups != 1 and not is_depthwise(node):
        return (f"groups={groups} unsupported (NNPACK convolutions are dense; the depthwise extension "
                "needs groups = input channels = output channels, forward only)")
    if tuple(attrs.get("dilation", (1, 1))) != (1, 1):
        return f"dilation {list(attrs['dilation'])} unsupported (NNPACK has no dilated convolution)"
    geom = conv_geometry(node)
    kh, kw = geom.kernel
    if max(kh, kw) > MAX_KERNEL:
        return f"kernel {kh}x{kw} exceeds the {MAX_KERNEL}x{MAX_KERNEL} limit"
    t, l, b, r = geom.padding
    if t >= kh or b >= kh or l >= kw or r >= kw:
        return f"padding {[t, l, b, r]} must be smaller than the kernel {kh}x{kw} on each side"
    if node.op != "conv2d" and geom.stride != (1, 1):
        return f"stride {list(geom.stride)} unsupported: NNPACK's gradient kernels need stride 1"
    return None


def _pool_reason(node: Node) -> str | None:
    attrs = attrs_of(node)
    kh, kw = attrs["kernel_size"]
    t, l, b, r = attrs["padding"]
    if tuple(attrs.get("dilation", (1, 1))) != (1, 1):
        return f"dilation {list(attrs['dilation'])} unsupported in max pooling"
    if attrs.get("ceil_mode", False):
        return "ceil_mode=True unsupported (NNPACK pools in floor mode)"
    if max(kh, kw) > MAX_KERNEL:
        return f"pooling window {kh}x{kw} exceeds the {MAX_KERNEL}x{MAX_KERNEL} limit"
    if t >= kh or b >= kh or l >= kw or r >= kw:
        return f"padding {[t, l, b, r]} must be smaller than the pooling window {kh}x{kw} on each side"
    return None


def support_reason(node: Node) -> str | None:
    """``None`` when nnpack runs ``node``, else the reason it declines."""
    if node.op in STRUCTURAL_OPS:
        return None
    if node.op not in CLAIMED_OPS:
        return f"op {node.op!r} is not in NNPACK's layer set {list(CLAIMED_OPS)}"
    for v in list(node.inputs) + list(node.outputs):
        if v.type.dtype != "f32":
            return f"dtype {v.type.dtype} of %{v.name} unsupported (nnpack computes in f32 only)"
    if node.op.startswith("conv2d"):
        return _conv_reason(node)
    if node.op == "max_pool2d":
        return _pool_reason(node)
    if node.op == "softmax":
        rank = node.inputs[0].type.rank
        dim = attrs_of(node)["dim"]
        if dim not in (-1, rank - 1):
            return f"softmax over dim {dim} of a rank-{rank} tensor unsupported (NNPACK normalises the last axis)"
    if node.op in RESIDUAL_OPS:
        a, b = node.inputs[0].type, node.inputs[1].type
        if tuple(a.shape) != tuple(b.shape):
            return (f"add of {list(a.shape)} and {list(b.shape)}: nnpack adds residual connections "
                    "only (two operands of one shape, no broadcasting)")
    if node.op == "linear" and node.inputs[1].type.rank != 2:
        return "linear weight must be 2-D [out_features, in_features]"
    if node.op == "global_avg_pool2d" and node.inputs[0].type.rank != 4:
        return "global average pooling needs an NCHW tensor"
    if node.op == "mul":
        a, b = tuple(node.inputs[0].type.shape), tuple(node.inputs[1].type.shape)
        if len(a) < 3 or (b != a and not (len(a) == 4 and b == (a[0], a[1], 1, 1))):
            return (f"mul of {list(a)} and {list(b)}: nnpack multiplies feature maps (rank 3 or more) "
                    "of one shape, or a feature map by a per-channel gate [N, C, 1, 1]")
    return None


def is_supported(node: Node, graph: Any = None) -> bool | Unsupported:
    """The partition answer: nnpack claims everything it runs (:func:`support_reason`), the
    squeeze-excitation ops on pooled ``[N, C, 1, 1]`` vectors included, so a block stays in
    nnpack's region — in a ``graph``, except where its region could not pay for its
    boundaries (:mod:`.context`)."""
    if graph is not None:
        from .context import context_reason

        reason = context_reason(node, graph)
    else:
        reason = support_reason(node)
    return True if reason is None else Unsupported(reason)
