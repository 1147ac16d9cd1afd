"""Softmax and log-softmax along one dim (numerically stable: the max is subtracted first)."""

from __future__ import annotations

from ._checks import normalize_dim, require_float
from .registry import AttrSpec, OpSchema, ShapeError, register


def _softmax_like(op: str):
    def infer(types, attrs):
        (x,) = types
        require_float(op, "x", x)
        if x.rank == 0:
            raise ShapeError(f"{op}: x must have rank >= 1, got {x}")
        normalize_dim(op, "dim", attrs["dim"], x.rank)
        return [x]

    return infer


register(
    OpSchema(
        "softmax",
        ("x",),
        _softmax_like("softmax"),
        attrs=(AttrSpec("dim", "int", -1, doc="the dim to normalise over; negative counts from the end"),),
        doc="exp(x) / sum(exp(x)) along dim.",
    )
)
register(
    OpSchema(
        "log_softmax",
        ("x",),
        _softmax_like("log_softmax"),
        attrs=(AttrSpec("dim", "int", -1, doc="the dim to normalise over; negative counts from the end"),),
        doc="x - log(sum(exp(x))) along dim.",
    )
)
