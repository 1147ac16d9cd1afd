"""Reductions over a set of dims: ``reduce_mean``, ``reduce_sum``, ``reduce_max``, ``reduce_min``.

``dims`` lists the reduced dims (negative counts from the end; empty means every dim);
``keepdim`` keeps them as size 1, as torch's ``keepdim`` and ONNX's ``keepdims``.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import normalize_dim, require_float
from .registry import AttrSpec, OpSchema, ShapeError, register

REDUCTIONS = ("reduce_mean", "reduce_sum", "reduce_max", "reduce_min")


def reduced_dims(op: str, dims, rank: int) -> tuple[int, ...]:
    """The reduced dims, normalised and sorted (every dim when ``dims`` is empty)."""
    if not dims:
        return tuple(range(rank))
    result = sorted(normalize_dim(op, "dims", int(d), rank) for d in dims)
    if len(set(result)) != len(result):
        raise ShapeError(f"{op}: dims {list(dims)} repeat a dim")
    return tuple(result)


def _reduce(op: str):
    def infer(types, attrs):
        (x,) = types
        if op == "reduce_mean":
            require_float(op, "x", x)
        elif x.dtype == "bool":
            raise ShapeError(f"{op}: x must be a numeric tensor, got {x}")
        dims = reduced_dims(op, attrs["dims"], x.rank)
        if op in ("reduce_max", "reduce_min", "reduce_mean") and any(x.shape[d] == 0 for d in dims):
            raise ShapeError(f"{op}: cannot reduce an empty dim of {x}")
        if attrs["keepdim"]:
            shape = tuple(1 if i in dims else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in dims)
        return [TensorType(x.dtype, shape)]

    return infer


_ATTRS = (
    AttrSpec("dims", "ints", (), doc="dims to reduce; empty reduces every dim"),
    AttrSpec("keepdim", "bool", False, doc="keep reduced dims with size 1"),
)
_DOCS = {
    "reduce_mean": "The mean over dims (torch.mean, ONNX ReduceMean).",
    "reduce_sum": "The sum over dims (torch.sum, ONNX ReduceSum).",
    "reduce_max": "The maximum over dims (torch.amax, ONNX ReduceMax).",
    "reduce_min": "The minimum over dims (torch.amin, ONNX ReduceMin).",
}
for _op in REDUCTIONS:
    register(OpSchema(_op, ("x",), _reduce(_op), attrs=_ATTRS, doc=_DOCS[_op]))
