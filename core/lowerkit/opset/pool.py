"""2-D pooling over NCHW tensors.

``padding`` is ``[top, left, bottom, right]`` (ONNX order). Output sizes follow torch:
``floor`` (or ``ceil`` with ``ceil_mode``) of
``(size + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride``, plus one; in
ceil mode a last window that would start past the input and the begin padding is dropped.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import MAX_WINDOW, int_list, pool_output_size, require_float, require_rank
from .registry import AttrSpec, OpSchema, ShapeError, register


def _pool_output_shape(op: str, x: TensorType, attrs: dict) -> tuple[int, int, int, int]:
    require_float(op, "x", x)
    require_rank(op, "x", x, 4)
    kernel = int_list(op, attrs, "kernel_size", 2, minimum=1, maximum=MAX_WINDOW)
    stride = int_list(op, attrs, "stride", 2, minimum=1, maximum=MAX_WINDOW)
    padding = int_list(op, attrs, "padding", 4, minimum=0, maximum=MAX_WINDOW)
    dilation = int_list(op, attrs, "dilation", 2, minimum=1, maximum=MAX_WINDOW) if "dilation" in attrs else (1, 1)
    extent = [dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1]
    # A window lying wholly in padding would have no input element (max of nothing).
    for i, side in enumerate(("top", "left", "bottom", "right")):
        if padding[i] >= extent[i % 2]:
            raise ShapeError(
                f"{op}: padding {list(padding)} must be smaller than the window extent "
                f"{extent} (dilation * (kernel - 1) + 1), but {side} padding is {padding[i]}"
            )
    n, c, h, w = x.shape
    ceil_mode = attrs["ceil_mode"]
    oh = pool_output_size(h, kernel[0], stride[0], padding[0], padding[2], dilation[0], ceil_mode)
    ow = pool_output_size(w, kernel[1], stride[1], padding[1], padding[3], dilation[1], ceil_mode)
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"{op}: window {extent[0]}x{extent[1]} does not fit input {h}x{w} with padding "
            f"{list(padding)} (output would be {oh}x{ow})"
        )
    return (n, c, oh, ow)


def _max_pool2d(types, attrs):
    (x,) = types
    return [TensorType(x.dtype, _pool_output_shape("max_pool2d", x, attrs))]


def _avg_pool2d(types, attrs):
    (x,) = types
    return [TensorType(x.dtype, _pool_output_shape("avg_pool2d", x, attrs))]


def _global_avg_pool2d(types, attrs):
    (x,) = types
    require_float("global_avg_pool2d", "x", x)
    require_rank("global_avg_pool2d", "x", x, 4)
    if x.shape[2] < 1 or x.shape[3] < 1:
        raise ShapeError(f"global_avg_pool2d: x must have a non-empty spatial extent, got {x}")
    return [TensorType(x.dtype, x.shape[:2] + (1, 1))]


_KERNEL = AttrSpec("kernel_size", "ints", doc="[KH, KW]")
_STRIDE = AttrSpec("stride", "ints", doc="[stride_h, stride_w] (front ends default it to kernel_size)")
_PADDING = AttrSpec("padding", "ints", (0, 0, 0, 0), doc="[top, left, bottom, right] (ONNX order)")
_CEIL = AttrSpec("ceil_mode", "bool", False, doc="round output sizes up instead of down")

register(
    OpSchema(
        "max_pool2d",
        ("x",),
        _max_pool2d,
        attrs=(_KERNEL, _STRIDE, _PADDING, AttrSpec("dilation", "ints", (1, 1), doc="[dh, dw]"), _CEIL),
        doc="Maximum over each window, as torch.nn.functional.max_pool2d; padding is -inf.",
    )
)
register(
    OpSchema(
        "avg_pool2d",
        ("x",),
        _avg_pool2d,
        attrs=(
            _KERNEL,
            _STRIDE,
            _PADDING,
            _CEIL,
            AttrSpec(
                "count_include_pad", "bool", True,
                doc="divide by the window size clipped to the padded input, instead of by "
                "the number of input elements in the window",
            ),
        ),
        doc="Mean over each window, as torch.nn.functional.avg_pool2d; padding counts as "
        "zeros when count_include_pad, and the part of a ceil_mode window past the end "
        "padding never counts.",
    )
)
register(
    OpSchema(
        "global_avg_pool2d",
        ("x",),
        _global_avg_pool2d,
        doc="Mean over H and W: [N, C, H, W] -> [N, C, 1, 1] (adaptive_avg_pool2d(x, 1)).",
    )
)
