"""Shared checks and window arithmetic for type inference (and for kernels that need it).

Every helper raises :class:`~lowerkit.opset.registry.ShapeError` with a message that
starts with the op name, so the verifier can add the node's scope and source line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir.types import TensorType
from .registry import ShapeError

FLOAT_DTYPES = frozenset({"f16", "f32", "f64"})

# Largest stride, dilation, padding or window size a convolution or pooling accepts. Far
# above any real network; refuses legal-but-absurd values from hostile files (a stride of
# 1e9) before they reach a kernel.
MAX_WINDOW = 1 << 16


def require_float(op: str, what: str, t: TensorType) -> None:
    """``t`` must have a floating-point dtype."""
    if t.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: {what} must be a float tensor (f16, f32 or f64), got {t}")


def require_same_dtype(op: str, named: Sequence[tuple[str, TensorType]]) -> str:
    """All named types share one dtype; returns it."""
    first_name, first = named[0]
    for name, t in named[1:]:
        if t.dtype != first.dtype:
            raise ShapeError(
                f"{op}: {name} has dtype {t.dtype} but {first_name} has dtype {first.dtype}"
            )
    return first.dtype


def require_rank(op: str, what: str, t: TensorType, rank: int) -> None:
    if t.rank != rank:
        raise ShapeError(f"{op}: {what} must have rank {rank}, got {t}")


def int_list(
    op: str, attrs: dict, name: str, length: int, *, minimum: int, maximum: int | None = None
) -> tuple[int, ...]:
    """Attribute ``name`` is a list of ``length`` ints, each >= ``minimum`` (and <= ``maximum``)."""
    value = tuple(attrs[name])
    if len(value) != length:
        raise ShapeError(f"{op}: {name} must have {length} values, got {list(value)}")
    if any(v < minimum for v in value):
        raise ShapeError(f"{op}: {name} values must be >= {minimum}, got {list(value)}")
    if maximum is not None and any(v > maximum for v in value):
        raise ShapeError(f"{op}: {name} values must be <= {maximum}, got {list(value)}")
    return value


def normalize_dim(op: str, name: str, dim: int, rank: int) -> int:
    """Map a possibly negative ``dim`` into ``[0, rank)``."""
    if not -rank <= dim < rank:
        raise ShapeError(f"{op}: {name}={dim} is out of range for rank {rank}")
    return dim + rank if dim < 0 else dim


def conv_output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> int:
    """floor((size + pads - dilation*(kernel-1) - 1) / stride) + 1; may be <= 0 if the kernel does not fit."""
    return (size + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride + 1


def pool_output_size(
    size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, ceil_mode: bool
) -> int:
    """Torch's pooling rule; with ceil_mode the last window must start inside input or begin padding."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = math.ceil(span / stride) + 1 if span >= 0 else span // stride + 1
    if span >= 0 and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out
