"""Shape ops: flatten, reshape, transpose and concat. Any dtype; data are not changed."""

from __future__ import annotations

import math

from ..ir.types import TensorType
from ._checks import normalize_dim
from .registry import AttrSpec, OpSchema, ShapeError, register


def _flatten(types, attrs):
    (x,) = types
    rank = max(x.rank, 1)  # torch flattens a scalar to [1]
    start = normalize_dim("flatten", "start_dim", attrs["start_dim"], rank)
    end = normalize_dim("flatten", "end_dim", attrs["end_dim"], rank)
    if start > end:
        raise ShapeError(f"flatten: start_dim {attrs['start_dim']} comes after end_dim {attrs['end_dim']} for rank {x.rank}")
    shape = x.shape if x.rank else (1,)
    merged = math.prod(shape[start : end + 1])
    return [TensorType(x.dtype, shape[:start] + (merged,) + shape[end + 1 :])]


def infer_reshape(op: str, in_shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """Resolve a target shape with at most one -1 against ``in_shape``."""
    if sum(1 for d in target if d == -1) > 1:
        raise ShapeError(f"{op}: shape may hold at most one -1, got {list(target)}")
    if any(d < -1 for d in target):
        raise ShapeError(f"{op}: shape entries must be >= 0 or -1, got {list(target)}")
    total = math.prod(in_shape)
    known = math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or total % known:
            raise ShapeError(f"{op}: cannot reshape {list(in_shape)} ({total} elements) to {list(target)}")
        target = tuple(total // known if d == -1 else d for d in target)
    elif known != total:
        raise ShapeError(
            f"{op}: cannot reshape {list(in_shape)} ({total} elements) to {list(target)} ({known} elements)"
        )
    return target


def _reshape(types, attrs):
    (x,) = types
    return [TensorType(x.dtype, infer_reshape("reshape", x.shape, tuple(attrs["shape"])))]


def _transpose(types, attrs):
    (x,) = types
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose: perm must be a permutation of 0..{x.rank - 1}, got {list(perm)}")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm))]


def _concat(types, attrs):
    if not types:
        raise ShapeError("concat: needs at least one input")
    first = types[0]
    if first.rank == 0:
        raise ShapeError(f"concat: inputs must have rank >= 1, got {first}")
    dim = normalize_dim("concat", "dim", attrs["dim"], first.rank)
    size = 0
    for i, t in enumerate(types):
        if t.dtype != first.dtype:
            raise ShapeError(f"concat: input {i} has dtype {t.dtype} but input 0 has {first.dtype}")
        if t.rank != first.rank:
            raise ShapeError(f"concat: input {i} has rank {t.rank} but input 0 has rank {first.rank}")
        for d in range(first.rank):
            if d != dim and t.shape[d] != first.shape[d]:
                raise ShapeError(
                    f"concat: input {i} has shape {list(t.shape)} but input 0 has {list(first.shape)}; "
                    f"they may differ only in dim {dim}"
                )
        size += t.shape[dim]
    return [TensorType(first.dtype, first.shape[:dim] + (size,) + first.shape[dim + 1 :])]


register(
    OpSchema(
        "flatten",
        ("x",),
        _flatten,
        attrs=(AttrSpec("start_dim", "int", 1), AttrSpec("end_dim", "int", -1)),
        doc="Merges dims start_dim..end_dim (inclusive, negative from the end) into one, as torch.flatten.",
    )
)
register(
    OpSchema(
        "reshape",
        ("x",),
        _reshape,
        attrs=(AttrSpec("shape", "ints", doc="target shape; one entry may be -1 (inferred)"),),
        doc="Row-major reshape to shape (one -1 is inferred; 0 means a zero-size dim, not 'copy').",
    )
)
register(
    OpSchema(
        "transpose",
        ("x",),
        _transpose,
        attrs=(AttrSpec("perm", "ints", doc="output dim i is input dim perm[i]"),),
        doc="Permutes dims: output dim i is input dim perm[i] (numpy.transpose / torch.permute).",
    )
)
register(
    OpSchema(
        "concat",
        ("xs",),
        _concat,
        attrs=(AttrSpec("dim", "int", 0, doc="the dim to join along; negative counts from the end"),),
        variadic=True,
        doc="Joins one or more tensors of one dtype along dim, as torch.cat.",
    )
)
