"""Selecting and arranging data: ``slice``, ``split``, ``gather``, ``pad`` and ``expand``.

Any dtype; values are moved, never computed (``pad`` fills with a constant or copies edges).
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import normalize_dim
from .registry import AttrSpec, OpSchema, ShapeError, register

PAD_MODES = ("constant", "reflect", "replicate")


def slice_ranges(op: str, shape, attrs) -> list[slice]:
    """One Python ``slice`` per dim of ``shape`` from the attributes (unsliced dims whole)."""
    starts, ends, axes, steps = (tuple(attrs[k]) for k in ("starts", "ends", "axes", "steps"))
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(
            f"{op}: starts, ends, axes and steps must have equal lengths, got "
            f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}"
        )
    ranges = [slice(None)] * len(shape)
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = normalize_dim(op, "axes", axis, len(shape))
        if dim in seen:
            raise ShapeError(f"{op}: axes {list(axes)} repeat dim {dim}")
        if step == 0:
            raise ShapeError(f"{op}: steps must be non-zero, got {list(steps)}")
        seen.add(dim)
        ranges[dim] = slice(start, end, step)
    return ranges


def _slice(types, attrs):
    (x,) = types
    ranges = slice_ranges("slice", x.shape, attrs)
    shape = tuple(len(range(*r.indices(d))) for r, d in zip(ranges, x.shape))
    return [TensorType(x.dtype, shape)]


def _split(types, attrs):
    (x,) = types
    if x.rank == 0:
        raise ShapeError(f"split: x must have rank >= 1, got {x}")
    dim = normalize_dim("split", "dim", attrs["dim"], x.rank)
    sizes = tuple(attrs["sizes"])
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != x.shape[dim]:
        raise ShapeError(
            f"split: sizes {list(sizes)} must be >= 0 and add up to dim {dim} of {x} ({x.shape[dim]})"
        )
    return [TensorType(x.dtype, x.shape[:dim] + (s,) + x.shape[dim + 1 :]) for s in sizes]


def _gather(types, attrs):
    (x,) = types
    if x.rank == 0:
        raise ShapeError(f"gather: x must have rank >= 1, got {x}")
    dim = normalize_dim("gather", "dim", attrs["dim"], x.rank)
    indices = attrs["indices"]
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"gather: indices must be integers, got dtype {indices.dtype}")
    size = x.shape[dim]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ShapeError(
            f"gather: indices must lie in [{-size}, {size - 1}] for dim {dim} of {x}, "
            f"got values from {indices.min()} to {indices.max()}"
        )
    return [TensorType(x.dtype, x.shape[:dim] + indices.shape + x.shape[dim + 1 :])]


def _pad(types, attrs):
    (x,) = types
    pads = tuple(attrs["pads"])
    mode = attrs["mode"]
    if len(pads) != 2 * x.rank:
        raise ShapeError(f"pad: pads must have 2 * rank = {2 * x.rank} values for {x}, got {list(pads)}")
    if mode not in PAD_MODES:
        raise ShapeError(f"pad: mode must be one of {list(PAD_MODES)}, got {mode!r}")
    if any(p < 0 for p in pads):
        raise ShapeError(f"pad: pads must be >= 0 (crop with slice), got {list(pads)}")
    shape = []
    for i, d in enumerate(x.shape):
        begin, end = pads[i], pads[i + x.rank]
        if mode == "reflect" and (begin or end) and max(begin, end) >= d:
            raise ShapeError(f"pad: reflect padding of dim {i} must be smaller than its size {d}, got {begin}, {end}")
        if mode == "replicate" and (begin or end) and d == 0:
            raise ShapeError(f"pad: cannot replicate-pad the empty dim {i} of {x}")
        shape.append(d + begin + end)
    return [TensorType(x.dtype, tuple(shape))]


def _expand(types, attrs):
    (x,) = types
    shape = tuple(attrs["shape"])
    if len(shape) < x.rank:
        raise ShapeError(f"expand: shape {list(shape)} has fewer dims than {x}")
    tail = shape[len(shape) - x.rank :]
    if any(d != s and d != 1 for d, s in zip(x.shape, tail)) or any(s < 0 for s in shape):
        raise ShapeError(f"expand: {x} cannot broadcast to {list(shape)}")
    return [TensorType(x.dtype, shape)]


register(OpSchema(
    "slice", ("x",), _slice,
    attrs=(
        AttrSpec("starts", "ints", doc="first index per sliced dim (negative counts from the end)"),
        AttrSpec("ends", "ints", doc="end index (exclusive) per sliced dim; clamped like Python"),
        AttrSpec("axes", "ints", doc="the sliced dims"),
        AttrSpec("steps", "ints", doc="step per sliced dim; negative walks backwards"),
    ),
    doc="x[start:end:step] along each of axes, with Python/numpy clamping (ONNX Slice).",
))
register(OpSchema(
    "split", ("x",), _split,
    attrs=(AttrSpec("dim", "int", 0, doc="the dim to split"),
           AttrSpec("sizes", "ints", doc="size of each part; they add up to the dim")),
    num_outputs=None,
    doc="Cuts x along dim into consecutive parts of the given sizes, one output each (torch.split).",
))
register(OpSchema(
    "gather", ("x",), _gather,
    attrs=(AttrSpec("dim", "int", 0, doc="the indexed dim"),
           AttrSpec("indices", "tensor", doc="integer indices (any shape; negative from the end)")),
    doc="numpy.take(x, indices, axis=dim) with constant indices (ONNX Gather; index_select for 1-D "
    "indices, select for a 0-d index). Not torch.gather.",
))
register(OpSchema(
    "pad", ("x",), _pad,
    attrs=(
        AttrSpec("pads", "ints", doc="[begin_0, ..., begin_{r-1}, end_0, ..., end_{r-1}] (ONNX order)"),
        AttrSpec("mode", "str", "constant", doc="'constant', 'reflect' or 'replicate'"),
        AttrSpec("value", "float", 0.0, doc="the fill value of constant padding"),
    ),
    doc="Pads every dim by pads (ONNX order, not torch's last-dim-first pairs): with value, "
    "by reflection without repeating the edge, or by repeating the edge.",
))
register(OpSchema(
    "expand", ("x",), _expand,
    attrs=(AttrSpec("shape", "ints", doc="the output shape; x broadcasts to it like numpy"),),
    doc="numpy.broadcast_to(x, shape) (torch expand with every -1 resolved; ONNX Expand).",
))

__all__ = ["PAD_MODES", "slice_ranges"]
