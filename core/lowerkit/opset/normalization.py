"""Normalisation with statistics of the input itself: ``layer_norm`` and ``group_norm``.

Both compute mean and (biased) variance per sample, normalise, then apply the optional
affine ``weight``/``bias``: over the trailing dims from ``axis`` for ``layer_norm`` (the
weight has those dims' shape), over each group of channels for ``group_norm`` (the weight
is per channel).
"""

from __future__ import annotations

from ._checks import normalize_dim, require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register


def _affine(op: str, types, expected: tuple[int, ...]) -> None:
    require_same_dtype(op, [("x", types[0])] + list(zip(("weight", "bias"), types[1:])))
    for name, t in zip(("weight", "bias"), types[1:]):
        if t.shape != expected:
            raise ShapeError(f"{op}: {name} must have shape {list(expected)}, got {list(t.shape)}")


def _eps(op: str, attrs) -> None:
    if attrs["eps"] < 0:
        raise ShapeError(f"{op}: eps must be >= 0, got {attrs['eps']}")


def _layer_norm(types, attrs):
    x = types[0]
    require_float("layer_norm", "x", x)
    if x.rank == 0:
        raise ShapeError(f"layer_norm: x must have rank >= 1, got {x}")
    axis = normalize_dim("layer_norm", "axis", attrs["axis"], x.rank)
    _affine("layer_norm", types, x.shape[axis:])
    _eps("layer_norm", attrs)
    return [x]


def _group_norm(types, attrs):
    x = types[0]
    require_float("group_norm", "x", x)
    if x.rank < 2:
        raise ShapeError(f"group_norm: x must have rank >= 2 ([N, C, ...]), got {x}")
    groups, channels = attrs["num_groups"], x.shape[1]
    if groups < 1 or channels % groups:
        raise ShapeError(f"group_norm: num_groups {groups} must be >= 1 and divide the {channels} channels")
    _affine("group_norm", types, (channels,))
    _eps("group_norm", attrs)
    return [x]


_EPS = AttrSpec("eps", "float", 1e-5, doc="added to the variance")
register(OpSchema(
    "layer_norm", ("x", "weight", "bias"), _layer_norm,
    attrs=(AttrSpec("axis", "int", -1, doc="first normalised dim; every dim from it on is normalised"), _EPS),
    num_optional=2,
    doc="(x - mean) / sqrt(var + eps) * weight + bias, statistics over dims axis..end, as "
    "torch.nn.functional.layer_norm (normalized_shape = x.shape[axis:]) and ONNX LayerNormalization.",
))
register(OpSchema(
    "group_norm", ("x", "weight", "bias"), _group_norm,
    attrs=(AttrSpec("num_groups", "int", doc="channel groups; channels must divide evenly"), _EPS),
    num_optional=2,
    doc="Normalises each group of channels of [N, C, ...] with its own mean and variance, then "
    "applies the per-channel weight and bias, as torch.nn.functional.group_norm.",
))
