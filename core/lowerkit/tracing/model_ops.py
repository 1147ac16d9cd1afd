"""Functional ops of mobile CNNs and transformers, with ``torch`` / ``torch.nn.functional`` signatures.

Re-exported by :mod:`lowerkit.ops`; like the rest of it, each call records nodes in the graph
being traced and returns a traced tensor. Shape-only ops (``squeeze``, ``unsqueeze``,
``channel_shuffle``) record ``reshape``/``transpose``; ``split`` and ``chunk`` return a tuple.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .builder import MethodBuilder
from .state import current_builder
from .tensor import TracedTensor

__all__ = [
    "amax", "amin", "broadcast_to", "cast", "channel_shuffle", "chunk", "conv_transpose2d", "erf", "expand",
    "gelu", "group_norm", "hardsigmoid", "hardswish", "index_select", "interpolate", "layer_norm",
    "max", "mean", "min", "narrow", "pad", "pow", "scaled_dot_product_attention", "select", "silu",
    "slice", "split", "squeeze", "sum", "unsqueeze", "where",
]

Tensor = Any  # max, min, sum, pow and slice shadow builtins here: use builtins.max etc.
_INT64_MAX = 2**63 - 1


def _builder(fn: str) -> MethodBuilder:
    builder = current_builder()
    if builder is None:
        raise InputError(
            f"lowerkit.ops.{fn} was called outside lowerkit.trace; ops record graph nodes and "
            "have no eager mode. Trace the code that calls it and run the result"
        )
    return builder


def _apply(fn: str, op: str, operands: Sequence[Any], attrs: dict[str, object] | None = None) -> TracedTensor:
    return _builder(fn).apply(op, operands, attrs)


def _shape(fn: str, x: Any) -> tuple[int, ...]:
    return _builder(fn).value_of(x, what=f"{fn} input").type.shape


def _dim(fn: str, dim: int, rank: int, name: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -rank <= dim < builtins.max(rank, 1):
        raise InputError(f"lowerkit.ops.{fn}: {name} {dim!r} is out of range for a rank-{rank} tensor")
    return int(dim) % rank if rank else 0


def _dims(fn: str, dim: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if dim is None:
        return ()
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    return tuple(_dim(fn, d, rank) for d in dims) if dims else ()


def _pair(fn: str, name: str, value: Any) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (int(value[0]), int(value[1]))
    raise InputError(f"lowerkit.ops.{fn}: {name} must be an int or a pair of ints, got {value!r}")


# -- activations ------------------------------------------------------------------------------
def hardsigmoid(input: Tensor, inplace: bool = False) -> TracedTensor:
    """relu6(x + 3) / 6."""
    return _apply("hardsigmoid", "hardsigmoid", [input])


def hardswish(input: Tensor, inplace: bool = False) -> TracedTensor:
    """x * relu6(x + 3) / 6."""
    return _apply("hardswish", "hardswish", [input])


def silu(input: Tensor, inplace: bool = False) -> TracedTensor:
    """x * sigmoid(x)."""
    return _apply("silu", "silu", [input])


def gelu(input: Tensor, approximate: str = "none") -> TracedTensor:
    """Exact GELU, or its tanh approximation with ``approximate="tanh"``."""
    if approximate not in ("none", "tanh"):
        raise InputError(f"lowerkit.ops.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _apply("gelu", "gelu", [input], {"approximate": approximate})


def erf(input: Tensor) -> TracedTensor:
    return _apply("erf", "erf", [input])


def pow(input: Tensor, exponent: Tensor | float) -> TracedTensor:
    """input ** exponent with broadcasting (a Python number takes input's dtype)."""
    return _apply("pow", "pow", [input, exponent])


def where(condition: Tensor, input: Tensor | float, other: Tensor | float) -> TracedTensor:
    """input where condition (a bool tensor) holds, else other (a Python number takes the other's dtype)."""
    builder = _builder("where")
    if isinstance(input, (bool, int, float)):
        other_value = builder.value_of(other, what="where other")
        input_value = builder.value_of(input, other_value.type, what="where input")
    else:
        input_value = builder.value_of(input, what="where input")
        other_value = builder.value_of(other, input_value.type, what="where other")
    cond = builder.value_of(condition, what="where condition")
    return builder.wrap(builder.emit("where", [cond, input_value, other_value], {}).outputs[0])


def cast(input: Tensor, dtype: Any) -> TracedTensor:
    """``input`` converted to ``dtype`` (a numpy dtype or lowerkit's short name: "f16", "i64", ...),
    as ``Tensor.to(dtype)``."""
    from ..ir.types import DTYPES, dtype_name

    try:
        name = dtype if isinstance(dtype, str) and dtype in DTYPES else dtype_name(np.dtype(dtype))
    except (TypeError, ValueError):
        raise InputError(f"lowerkit.ops.cast: dtype must be one of {sorted(DTYPES)} or a numpy dtype, "
                         f"got {dtype!r}") from None
    return _apply("cast", "cast", [input], {"dtype": name})


# -- reductions ---------------------------------------------------------------------------------
def _reduce(fn: str, op: str, input: Tensor, dim: Any, keepdim: bool) -> TracedTensor:
    rank = len(_shape(fn, input))
    return _apply(fn, op, [input], {"dims": _dims(fn, dim, rank), "keepdim": bool(keepdim)})


def mean(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> TracedTensor:
    """Mean over ``dim`` (an int, a sequence, or None for every dim)."""
    return _reduce("mean", "reduce_mean", input, dim, keepdim)


def sum(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> TracedTensor:
    """Sum over ``dim`` (an int, a sequence, or None for every dim)."""
    return _reduce("sum", "reduce_sum", input, dim, keepdim)


def amax(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> TracedTensor:
    """Maximum over ``dim`` (empty: every dim)."""
    return _reduce("amax", "reduce_max", input, dim, keepdim)


def amin(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> TracedTensor:
    """Minimum over ``dim`` (empty: every dim)."""
    return _reduce("amin", "reduce_min", input, dim, keepdim)


def max(input: Tensor, dim: int | None = None, keepdim: bool = False) -> TracedTensor:
    """The maximum of all elements. With ``dim`` torch also returns indices, which lowerkit
    does not compute: use :func:`amax` for the values."""
    if dim is not None:
        raise InputError("lowerkit.ops.max: max over a dim returns indices, which lowerkit lacks; use amax(x, dim)")
    return amax(input, (), keepdim)


def min(input: Tensor, dim: int | None = None, keepdim: bool = False) -> TracedTensor:
    """The minimum of all elements; use :func:`amin` for a dim (torch returns indices too)."""
    if dim is not None:
        raise InputError("lowerkit.ops.min: min over a dim returns indices, which lowerkit lacks; use amin(x, dim)")
    return amin(input, (), keepdim)


# -- normalisation ---------------------------------------------------------------------------------
def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> TracedTensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift."""
    builder = _builder("layer_norm")
    shape = _shape("layer_norm", input)
    normalized = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if not normalized or tuple(shape[len(shape) - len(normalized):]) != tuple(int(d) for d in normalized):
        raise InputError(
            f"lowerkit.ops.layer_norm: normalized_shape {list(normalized)} must be the trailing dims of {list(shape)}"
        )
    operands = [input]
    if weight is None and bias is not None:
        dtype = builder.value_of(input).type.numpy_dtype
        weight = np.ones(normalized, dtype=dtype)
    if weight is not None:
        operands.append(weight)
    if bias is not None:
        operands.append(bias)
    return builder.apply("layer_norm", operands, {"axis": len(shape) - len(normalized), "eps": float(eps)})


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> TracedTensor:
    """Normalise each of ``num_groups`` channel groups of [N, C, ...], then scale and shift per channel."""
    builder = _builder("group_norm")
    operands = [input]
    if weight is None and bias is not None:
        x_type = builder.value_of(input).type
        weight = np.ones(x_type.shape[1:2], dtype=x_type.numpy_dtype)
    if weight is not None:
        operands.append(weight)
    if bias is not None:
        operands.append(bias)
    return builder.apply("group_norm", operands, {"num_groups": int(num_groups), "eps": float(eps)})


# -- selecting and arranging -----------------------------------------------------------------------
def slice(input: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,
          step: int = 1) -> TracedTensor:
    """``input[..., start:end:step, ...]`` along ``dim`` (``aten.slice``; negative step allowed)."""
    rank = len(_shape("slice", input))
    d = _dim("slice", dim, rank)
    if step == 0:
        raise InputError("lowerkit.ops.slice: step must be non-zero")
    if start is None:
        start = 0 if step > 0 else -1
    if end is None:
        end = _INT64_MAX if step > 0 else -_INT64_MAX - 1
    attrs = {"starts": (int(start),), "ends": (int(end),), "axes": (d,), "steps": (int(step),)}
    return _apply("slice", "slice", [input], attrs)


def narrow(input: Tensor, dim: int, start: int, length: int) -> TracedTensor:
    """``length`` elements of ``dim`` from ``start`` (torch.narrow)."""
    shape = _shape("narrow", input)
    d = _dim("narrow", dim, len(shape))
    begin = start % shape[d] if start < 0 else start
    if length < 0 or begin + length > shape[d]:
        raise InputError(f"lowerkit.ops.narrow: start {start} + length {length} exceeds dim {d} of size {shape[d]}")
    return slice(input, d, begin, begin + length)


def split(tensor: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[TracedTensor, ...]:
    """Parts of ``split_size_or_sections`` each (the last may be smaller), or of the listed sizes."""
    builder = _builder("split")
    shape = _shape("split", tensor)
    d = _dim("split", dim, len(shape))
    if isinstance(split_size_or_sections, (int, np.integer)):
        step = int(split_size_or_sections)
        if step < 1:
            raise InputError(f"lowerkit.ops.split: split size must be >= 1, got {step}")
        sizes = [step] * (shape[d] // step) + ([shape[d] % step] if shape[d] % step else [])
    else:
        sizes = [int(s) for s in split_size_or_sections]
    value = builder.value_of(tensor, what="split input")
    node = builder.emit("split", [value], {"dim": d, "sizes": tuple(sizes)})
    return tuple(builder.wrap(v) for v in node.outputs)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[TracedTensor, ...]:
    """``chunks`` parts of ceil(size / chunks) (fewer if the size runs out), as torch.chunk."""
    shape = _shape("chunk", input)
    d = _dim("chunk", dim, len(shape))
    if chunks < 1:
        raise InputError(f"lowerkit.ops.chunk: chunks must be >= 1, got {chunks}")
    return split(input, builtins.max(-(-shape[d] // chunks), 1), d)


def index_select(input: Tensor, dim: int, index: Any) -> TracedTensor:
    """Rows ``index`` (a constant 1-D integer array or list) of ``dim``."""
    indices = np.asarray(index)
    if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
        raise InputError(f"lowerkit.ops.index_select: index must be a 1-D integer array, got {index!r}")
    rank = len(_shape("index_select", input))
    attrs = {"dim": _dim("index_select", dim, rank), "indices": indices.astype(np.int64)}
    return _apply("index_select", "gather", [input], attrs)


def select(input: Tensor, dim: int, index: int) -> TracedTensor:
    """Element ``index`` of ``dim``, which is dropped (torch.select; ``x[:, 0]``)."""
    rank = len(_shape("select", input))
    attrs = {"dim": _dim("select", dim, rank), "indices": np.array(int(index), dtype=np.int64)}
    return _apply("select", "gather", [input], attrs)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "replicate"}


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> TracedTensor:
    """torch's ``F.pad``: ``pad`` holds (begin, end) pairs from the last dim backwards."""
    shape = _shape("pad", input)
    if mode not in _PAD_MODES:
        raise InputError(f"lowerkit.ops.pad: mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    pairs = [int(p) for p in pad]
    if len(pairs) % 2 or len(pairs) // 2 > len(shape):
        raise InputError(f"lowerkit.ops.pad: pad must hold (begin, end) pairs for at most {len(shape)} dims, got {pad!r}")
    rank = len(shape)
    pads = [0] * (2 * rank)
    for i in range(len(pairs) // 2):
        dim = rank - 1 - i
        pads[dim], pads[dim + rank] = pairs[2 * i], pairs[2 * i + 1]
    attrs = {"pads": tuple(pads), "mode": mode, "value": 0.0 if value is None else float(value)}
    return _apply("pad", "pad", [input], attrs)


def expand(input: Tensor, *sizes: int | Sequence[int]) -> TracedTensor:
    """Broadcast to ``sizes`` (``-1`` keeps a dim), as ``Tensor.expand``."""
    target = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else tuple(sizes)
    shape = _shape("expand", input)
    offset = len(target) - len(shape)
    if offset < 0:
        raise InputError(f"lowerkit.ops.expand: sizes {list(target)} have fewer dims than {list(shape)}")
    resolved = tuple(shape[i - offset] if s == -1 and i >= offset else int(s) for i, s in enumerate(target))
    return _apply("expand", "expand", [input], {"shape": resolved})


def broadcast_to(input: Tensor, size: Sequence[int]) -> TracedTensor:
    return expand(input, tuple(size))


def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> TracedTensor:
    """Drop size-1 dims (all, or those of ``dim`` that have size 1); records ``reshape``."""
    shape = _shape("squeeze", input)
    dims = set(range(len(shape))) if dim is None else set(_dims("squeeze", dim, len(shape)))
    target = tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))
    return _apply("squeeze", "reshape", [input], {"shape": target})


def unsqueeze(input: Tensor, dim: int) -> TracedTensor:
    """Insert a size-1 dim at ``dim`` (negative counts from the end of the result)."""
    shape = list(_shape("unsqueeze", input))
    d = _dim("unsqueeze", dim, len(shape) + 1)
    shape.insert(d, 1)
    return _apply("unsqueeze", "reshape", [input], {"shape": tuple(shape)})


def channel_shuffle(input: Tensor, groups: int) -> TracedTensor:
    """ShuffleNet's shuffle of [N, C, ...]: reshape to groups, swap, flatten back."""
    shape = _shape("channel_shuffle", input)
    if len(shape) < 2 or groups < 1 or shape[1] % groups:
        raise InputError(f"lowerkit.ops.channel_shuffle: groups {groups} must divide the channels of {list(shape)}")
    n, c, rest = shape[0], shape[1], tuple(shape[2:])
    x = _apply("channel_shuffle", "reshape", [input], {"shape": (n, groups, c // groups) + rest})
    perm = (0, 2, 1) + tuple(range(3, 3 + len(rest)))
    x = _apply("channel_shuffle", "transpose", [x], {"perm": perm})
    return _apply("channel_shuffle", "reshape", [x], {"shape": tuple(shape)})


# -- resizing ------------------------------------------------------------------------------------------
_LINEAR_MODES = ("linear", "bilinear", "trilinear")


def interpolate(input: Tensor, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> TracedTensor:
    """Resize the spatial dims of [N, C, ...] by nearest or (bi/tri)linear interpolation."""
    shape = _shape("interpolate", input)
    spatial = len(shape) - 2
    if spatial < 1:
        raise InputError(f"lowerkit.ops.interpolate: input must be [N, C, spatial...], got {list(shape)}")
    if mode != "nearest" and mode not in _LINEAR_MODES:
        raise InputError(f"lowerkit.ops.interpolate: mode must be nearest or (bi/tri)linear, got {mode!r}")
    if antialias:
        raise InputError("lowerkit.ops.interpolate: antialias=True is not supported")
    if mode == "nearest" and align_corners:
        raise InputError("lowerkit.ops.interpolate: align_corners applies to linear modes only")
    if (size is None) == (scale_factor is None):
        raise InputError("lowerkit.ops.interpolate: give exactly one of size and scale_factor")
    in_sizes = shape[2:]
    if size is not None:
        out = [int(size)] * spatial if isinstance(size, (int, np.integer)) else [int(s) for s in size]
        if len(out) != spatial:
            raise InputError(f"lowerkit.ops.interpolate: size needs {spatial} values, got {size!r}")
        scales = [o / i for o, i in zip(out, in_sizes)]
    else:
        factors = [float(scale_factor)] * spatial if isinstance(scale_factor, (int, float)) else [float(s) for s in scale_factor]
        if len(factors) != spatial:
            raise InputError(f"lowerkit.ops.interpolate: scale_factor needs {spatial} values, got {scale_factor!r}")
        out = [int(math.floor(i * f)) for i, f in zip(in_sizes, factors)]
        scales = [o / i for o, i in zip(out, in_sizes)] if recompute_scale_factor else factors
    if mode == "nearest":
        transform, kind = "asymmetric", "nearest"
    else:
        transform, kind = ("align_corners" if align_corners else "half_pixel"), "linear"
    attrs = {"size": tuple(out), "scales": tuple(scales), "mode": kind,
             "coordinate_transformation_mode": transform, "nearest_mode": "floor"}
    return _apply("interpolate", "interpolate", [input], attrs)


# -- attention and transposed convolution --------------------------------------------------------------
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> TracedTensor:
    """softmax(q @ k^T * scale + mask) @ v; ``scale`` defaults to 1 / sqrt(E). No dropout."""
    if dropout_p:
        raise InputError("lowerkit.ops.scaled_dot_product_attention: dropout_p must be 0 (inference)")
    if enable_gqa:
        raise InputError("lowerkit.ops.scaled_dot_product_attention: enable_gqa is not supported")
    features = _shape("scaled_dot_product_attention", query)[-1]
    attrs = {"scale": float(scale) if scale is not None else 1.0 / math.sqrt(features), "is_causal": bool(is_causal)}
    operands = [query, key, value] + ([attn_mask] if attn_mask is not None else [])
    return _apply("scaled_dot_product_attention", "scaled_dot_product_attention", operands, attrs)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> TracedTensor:
    """Transposed 2-D convolution, weight [C_in, C_out / groups, KH, KW] (torch's argument order)."""
    ph, pw = _pair("conv_transpose2d", "padding", padding)
    attrs = {
        "stride": _pair("conv_transpose2d", "stride", stride),
        "padding": (ph, pw, ph, pw),
        "output_padding": _pair("conv_transpose2d", "output_padding", output_padding),
        "dilation": _pair("conv_transpose2d", "dilation", dilation),
        "groups": int(groups),
    }
    operands = [input, weight] + ([bias] if bias is not None else [])
    return _apply("conv_transpose2d", "conv_transpose2d", operands, attrs)
