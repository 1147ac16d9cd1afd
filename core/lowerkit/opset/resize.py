"""``interpolate``: nearest and (multi-)linear resizing of the spatial dims (2..) of [N, C, ...].

An output coordinate ``o`` along a dim maps to the input coordinate ``i`` by the
``coordinate_transformation_mode`` (ONNX's names), with ``scale`` from ``scales``:

- ``asymmetric``: ``i = o / scale`` (torch nearest);
- ``half_pixel``: ``i = (o + 0.5) / scale - 0.5`` (torch linear, align_corners=False);
- ``pytorch_half_pixel``: as half_pixel, but 0 when the output size is 1;
- ``align_corners``: ``i = o * (in - 1) / (out - 1)`` (0 when out is 1).

Nearest picks the input index by ``nearest_mode`` (torch's nearest is ``floor``); linear
interpolates between the two neighbours, clamped to the input.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import require_float
from .registry import AttrSpec, OpSchema, ShapeError, register

RESIZE_MODES = ("nearest", "linear")
COORDINATE_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")
NEAREST_MODES = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _interpolate(types, attrs):
    (x,) = types
    require_float("interpolate", "x", x)
    if x.rank < 3:
        raise ShapeError(f"interpolate: x must be [N, C, spatial...] (rank >= 3), got {x}")
    size, scales = tuple(attrs["size"]), tuple(attrs["scales"])
    spatial = x.rank - 2
    if len(size) != spatial or len(scales) != spatial:
        raise ShapeError(
            f"interpolate: size and scales need one value per spatial dim ({spatial}), "
            f"got size {list(size)} and scales {list(scales)}"
        )
    if any(s < 1 for s in size) or any(not s > 0 for s in scales):
        raise ShapeError(f"interpolate: size must be >= 1 and scales > 0, got {list(size)} and {list(scales)}")
    for name, allowed in (("mode", RESIZE_MODES), ("coordinate_transformation_mode", COORDINATE_MODES),
                          ("nearest_mode", NEAREST_MODES)):
        if attrs[name] not in allowed:
            raise ShapeError(f"interpolate: {name} must be one of {list(allowed)}, got {attrs[name]!r}")
    if any(d == 0 for d in x.shape[2:]):
        raise ShapeError(f"interpolate: cannot resize the empty spatial dims of {x}")
    return [TensorType(x.dtype, x.shape[:2] + size)]


register(OpSchema(
    "interpolate", ("x",), _interpolate,
    attrs=(
        AttrSpec("size", "ints", doc="output size of each spatial dim"),
        AttrSpec("scales", "floats", doc="scale of each spatial dim for the coordinate mapping "
                 "(output / input size unless a scale factor was given)"),
        AttrSpec("mode", "str", "nearest", doc="'nearest' or 'linear' (bilinear in 2-D)"),
        AttrSpec("coordinate_transformation_mode", "str", "asymmetric", doc="see the op's docs"),
        AttrSpec("nearest_mode", "str", "floor", doc="rounding of nearest: floor, ceil, round_prefer_floor/ceil"),
    ),
    doc="Resizes the spatial dims of [N, C, ...] to size by nearest or linear interpolation, as "
    "torch.nn.functional.interpolate and ONNX Resize, with ONNX's coordinate transformation modes "
    "asymmetric, half_pixel, pytorch_half_pixel and align_corners.",
))
