"""ATen importers for shapes, views and indexing (reshape, permute, cat, slice, split, gather,
as_strided, ...). See :mod:`._aten_ops` for the calling convention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tracing import ops
from ._aten_ops import _dim, _dims, _shape
from ._importer import ImportContext
from ._registry import aten


# -- shapes ----------------------------------------------------------------------------------------
@aten("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(ctx: ImportContext, x: Any, shape: Sequence[int]) -> Any:
    return ops.reshape(x, tuple(int(s) for s in shape))


@aten("aten.unsqueeze.default")
def unsqueeze(ctx: ImportContext, x: Any, dim: int) -> Any:
    shape = list(_shape(x))
    shape.insert(_dim(dim, len(shape) + 1), 1)
    return ops.reshape(x, shape)


@aten("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def squeeze(ctx: ImportContext, x: Any, dim: Any = None) -> Any:
    shape = _shape(x)
    dims = _dims(dim, len(shape))
    return ops.reshape(x, [s for i, s in enumerate(shape) if not (i in dims and s == 1)])


@aten("aten.flatten.using_ints")
def flatten(ctx: ImportContext, x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    return ops.flatten(x, start_dim, end_dim)


@aten("aten.permute.default")
def permute(ctx: ImportContext, x: Any, dims: Sequence[int]) -> Any:
    return ops.permute(x, tuple(dims))


@aten("aten.t.default", "aten.numpy_T.default")
def t(ctx: ImportContext, x: Any) -> Any:
    rank = len(_shape(x))
    return x if rank < 2 else ops.permute(x, tuple(reversed(range(rank))))


@aten("aten.transpose.int")
def transpose(ctx: ImportContext, x: Any, dim0: int, dim1: int) -> Any:
    return ops.transpose(x, dim0, dim1)


@aten("aten.cat.default")
def cat(ctx: ImportContext, tensors: Sequence[Any], dim: int = 0) -> Any:
    rank = len(_shape(tensors[0]))
    return ops.concat(list(tensors), dim=_dim(dim, rank))


@aten("aten.expand.default", requires=("expand",))
def expand(ctx: ImportContext, x: Any, sizes: Sequence[int], implicit: bool = False) -> Any:
    shape = _shape(x)
    sizes = [int(s) for s in sizes]
    if list(shape) == sizes:
        return x
    return ops.expand(x, sizes)


@aten("aten.slice.Tensor", requires=("slice",))
def slice_(ctx: ImportContext, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    shape = _shape(x)
    dim = _dim(dim, len(shape))
    begin, stop, stride = slice(start, end, step).indices(shape[dim])
    if (begin, stop, stride) == (0, shape[dim], 1):
        return x
    return ops.slice(x, dim, begin, stop, stride)


@aten("aten.select.int", requires=("slice",))
def select(ctx: ImportContext, x: Any, dim: int, index: int) -> Any:
    shape = _shape(x)
    dim = _dim(dim, len(shape))
    index = index % shape[dim]
    part = ops.slice(x, dim, index, index + 1, 1)
    return ops.reshape(part, [s for i, s in enumerate(shape) if i != dim])


@aten("aten.split_with_sizes.default", requires=("split",))
def split_with_sizes(ctx: ImportContext, x: Any, sizes: Sequence[int], dim: int = 0) -> tuple:
    return tuple(ops.split(x, [int(s) for s in sizes], dim=_dim(dim, len(_shape(x)))))


@aten("aten.split.Tensor", requires=("split",))
def split(ctx: ImportContext, x: Any, size: int, dim: int = 0) -> tuple:
    return tuple(ops.split(x, int(size), dim=_dim(dim, len(_shape(x)))))


@aten("aten.index_select.default", requires=("index_select",))
def index_select(ctx: ImportContext, x: Any, dim: int, index: Any) -> Any:
    if not isinstance(index, np.ndarray):
        raise ctx.unsupported("index_select with computed indices; lowerkit needs them at import time")
    return ops.index_select(x, _dim(dim, len(_shape(x))), index)


@aten("aten.index.Tensor", requires=("index_select",))
def index(ctx: ImportContext, x: Any, indices: Sequence[Any]) -> Any:
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) != 1 or not isinstance(used[0][1], np.ndarray):
        raise ctx.unsupported("advanced indexing other than one constant index tensor on one dim")
    dim, idx = used[0]
    flat = ops.index_select(x, dim, idx.reshape(-1))
    shape = _shape(x)
    return ops.reshape(flat, [*shape[:dim], *idx.shape, *shape[dim + 1:]])


@aten("aten.as_strided.default")
def as_strided(ctx: ImportContext, x: Any, size: Sequence[int], stride: Sequence[int],
               storage_offset: Any = None) -> Any:
    """A view of the input's storage, imported as the gather it amounts to.

    Decompositions use it to restore a memory format (the same logical tensor), which is then
    a reshape. The input's strides come from the exported node's metadata; lowerkit tensors
    have no strides, so the view is resolved here, at import time.
    """
    val = ctx.node.args[0].meta.get("val")
    if val is None:
        raise ctx.unsupported("as_strided on a tensor of unknown strides")
    shape, in_strides = tuple(val.shape), tuple(val.stride())
    # storage offset -> flat logical index of the input (it must cover each offset once)
    positions = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    offsets = np.asarray(in_strides, np.int64) @ positions if shape else np.zeros(1, np.int64)
    inverse = {int(o): i for i, o in enumerate(offsets)}
    if len(inverse) != offsets.size:
        raise ctx.unsupported("as_strided of a tensor whose storage overlaps itself")
    out = np.indices(tuple(size)).reshape(len(size), -1)
    wanted = int(storage_offset or 0) + np.asarray(stride, np.int64) @ out
    try:
        flat = np.array([inverse[int(o)] for o in wanted], dtype=np.int64)
    except KeyError:
        raise ctx.unsupported("as_strided reading outside the input's elements") from None
    if np.array_equal(flat, np.arange(flat.size)) and flat.size == offsets.size:
        return ops.reshape(x, tuple(size))
    return ops.reshape(ops.index_select(ops.reshape(x, (-1,)), 0, flat), tuple(size))


_TORCH_DTYPES = {"torch.float32": np.float32, "torch.float64": np.float64, "torch.float16": np.float16,
                 "torch.int64": np.int64, "torch.int32": np.int32, "torch.bool": np.bool_}


@aten("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def full_like(ctx: ImportContext, x: Any, fill_value: Any = None, *, dtype: Any = None, **kwargs: Any) -> Any:
    """A constant of ``x``'s (static) shape: only the shape is read, never the data."""
    target = str(ctx.node.target)
    value = 0 if "zeros" in target else 1 if "ones" in target else fill_value
    if dtype is not None and str(dtype) not in _TORCH_DTYPES:
        raise ctx.unsupported(f"a constant of dtype {dtype}")
    numpy_dtype = _TORCH_DTYPES[str(dtype)] if dtype is not None else x.dtype
    return ctx.constant(np.full(_shape(x), value, dtype=numpy_dtype))
