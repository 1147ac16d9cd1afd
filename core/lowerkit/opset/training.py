"""Ops of training graphs: batch norm with batch statistics, normalisation gradients,
labels as one-hot rows and dropout with an explicit seed.

``batch_norm_train`` normalises with the batch's own mean and biased variance per channel
and returns them, so the caller can update running statistics and the backward pass can
reuse them. ``dropout`` draws its mask from ``seed`` (an ``i64[]`` input), so a step is a
pure function of its inputs and its gradient is ``dropout`` of the gradient with the same seed.
"""

from __future__ import annotations

from ..ir.types import TensorType
from ._checks import normalize_dim, require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register

_EPS = AttrSpec("eps", "float", 1e-5, doc="added to the variance")


def _channels(op: str, x: TensorType) -> int:
    require_float(op, "x", x)
    if x.rank < 2:
        raise ShapeError(f"{op}: x must have rank >= 2 ([N, C, ...]), got {x}")
    return x.shape[1]


def _vectors(op: str, named, size: int, dtype: str) -> None:
    for name, t in named:
        if t.dtype != dtype or t.shape != (size,):
            raise ShapeError(f"{op}: {name} must be {dtype}[{size}], got {t}")


def _batch_norm_train(types, attrs):
    x, weight, bias = types
    c = _channels("batch_norm_train", x)
    _vectors("batch_norm_train", [("weight", weight), ("bias", bias)], c, x.dtype)
    stat = TensorType(x.dtype, (c,))
    return [x, stat, stat]


def _batch_norm_train_grad(types, attrs):
    x, weight, mean, var, grad = types
    c = _channels("batch_norm_train_grad", x)
    _vectors("batch_norm_train_grad", [("weight", weight), ("mean", mean), ("var", var)], c, x.dtype)
    if grad != x:
        raise ShapeError(f"batch_norm_train_grad: grad must have x's type {x}, got {grad}")
    vec = TensorType(x.dtype, (c,))
    return [x, vec, vec]


def _norm_grad(op: str):
    def infer(types, attrs):
        x, grad = types[0], types[1]
        require_float(op, "x", x)
        if grad != x:
            raise ShapeError(f"{op}: grad must have x's type {x}, got {grad}")
        if op == "layer_norm_grad":
            if x.rank == 0:
                raise ShapeError(f"{op}: x must have rank >= 1, got {x}")
            affine = x.shape[normalize_dim(op, "axis", attrs["axis"], x.rank):]
        else:
            c = _channels(op, x)
            if attrs["num_groups"] < 1 or c % attrs["num_groups"]:
                raise ShapeError(f"{op}: num_groups {attrs['num_groups']} must divide the {c} channels")
            affine = (c,)
        if len(types) > 2 and types[2] != TensorType(x.dtype, affine):
            raise ShapeError(f"{op}: weight must be {TensorType(x.dtype, affine)}, got {types[2]}")
        vec = TensorType(x.dtype, affine)
        return [x, vec, vec]

    return infer


def _one_hot(types, attrs):
    (labels,) = types
    if labels.dtype not in ("i64", "i32"):
        raise ShapeError(f"one_hot: labels must be i64 or i32, got {labels}")
    if attrs["num_classes"] < 1:
        raise ShapeError(f"one_hot: num_classes must be >= 1, got {attrs['num_classes']}")
    if attrs["dtype"] not in ("f16", "f32", "f64"):
        raise ShapeError(f"one_hot: dtype must be f16, f32 or f64, got {attrs['dtype']!r}")
    return [TensorType(attrs["dtype"], labels.shape + (attrs["num_classes"],))]


def _dropout(types, attrs):
    x, seed = types
    require_float("dropout", "x", x)
    if seed != TensorType("i64", ()):
        raise ShapeError(f"dropout: seed must be i64[], got {seed}")
    if not 0.0 <= attrs["p"] < 1.0:
        raise ShapeError(f"dropout: p must be in [0, 1), got {attrs['p']}")
    return [x]


register(OpSchema(
    "batch_norm_train", ("x", "weight", "bias"), _batch_norm_train, attrs=(_EPS,), num_outputs=3,
    doc="Training batch norm over [N, C, ...]: normalises with the batch mean and biased variance "
    "of each channel, then weight and bias; returns (y, mean, var), as torch's batch_norm with "
    "training=True (which also returns the statistics it used).",
))
register(OpSchema(
    "batch_norm_train_grad", ("x", "weight", "mean", "var", "grad"), _batch_norm_train_grad,
    attrs=(_EPS,), num_outputs=3,
    doc="(grad_x, grad_weight, grad_bias) of batch_norm_train, given its batch statistics.",
))
register(OpSchema(
    "layer_norm_grad", ("x", "grad", "weight"), _norm_grad("layer_norm_grad"),
    attrs=(AttrSpec("axis", "int", -1), _EPS), num_optional=1, num_outputs=3,
    doc="(grad_x, grad_weight, grad_bias) of layer_norm; weight absent means 1.",
))
register(OpSchema(
    "group_norm_grad", ("x", "grad", "weight"), _norm_grad("group_norm_grad"),
    attrs=(AttrSpec("num_groups", "int"), _EPS), num_optional=1, num_outputs=3,
    doc="(grad_x, grad_weight, grad_bias) of group_norm; weight absent means 1.",
))
register(OpSchema(
    "one_hot", ("labels",), _one_hot,
    attrs=(AttrSpec("num_classes", "int"), AttrSpec("dtype", "str", "f32", doc="float dtype of the result")),
    doc="Rows of the identity: out[..., k] = 1 where labels == k, else 0 (labels outside "
    "[0, num_classes) give a zero row).",
))
register(OpSchema(
    "dropout", ("x", "seed"), _dropout,
    attrs=(AttrSpec("p", "float", 0.5, doc="probability of zeroing an element"),
           AttrSpec("salt", "int", 0, doc="distinguishes dropout nodes sharing one seed")),
    doc="Training dropout: x * mask / (1 - p), the mask drawn from numpy's PCG64 seeded with "
    "[seed, salt] (each element kept with probability 1 - p); the same seed gives the same mask.",
))
