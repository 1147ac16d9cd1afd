"""Normalisation: inference-mode batch norm over dim 1 (channels)."""

from __future__ import annotations

from ._checks import require_float, require_same_dtype
from .registry import AttrSpec, OpSchema, ShapeError, register

_PARAMS = ("running_mean", "running_var", "weight", "bias")


def _batch_norm(types, attrs):
    x = types[0]
    require_same_dtype("batch_norm", [("x", x)] + list(zip(_PARAMS, types[1:])))
    require_float("batch_norm", "x", x)
    if x.rank < 2:
        raise ShapeError(f"batch_norm: x must have rank >= 2 ([N, C, ...]), got {x}")
    channels = x.shape[1]
    for name, t in zip(_PARAMS, types[1:]):
        if t.shape != (channels,):
            raise ShapeError(
                f"batch_norm: {name} must have shape [{channels}] (x has {channels} channels), "
                f"got {list(t.shape)}"
            )
    if attrs["eps"] < 0:
        raise ShapeError(f"batch_norm: eps must be >= 0, got {attrs['eps']}")
    return [x]


register(
    OpSchema(
        "batch_norm",
        ("x", "running_mean", "running_var", "weight", "bias"),
        _batch_norm,
        attrs=(AttrSpec("eps", "float", 1e-5, doc="added to the variance"),),
        doc="Inference batch norm: (x - running_mean) / sqrt(running_var + eps) * weight + bias, "
        "each [C] vector broadcast over dim 1.",
    )
)
