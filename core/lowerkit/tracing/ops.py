"""Functional ops for traced code, with ``torch.nn.functional`` signatures where one exists.

Each function records one node (a few record a constant too) in the graph being traced and
returns a :class:`~lowerkit.tracing.api.TracedTensor`. Inputs may be traced tensors,
``nn.Parameter`` s, numpy arrays (recorded as constants) and, for binary ops, Python numbers.
Outside :func:`lowerkit.trace` they raise :class:`~lowerkit.errors.InputError`: lowerkit has
no eager mode; trace a function that calls them and run the resulting module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .builder import MethodBuilder
from .state import current_builder
from .tensor import TracedTensor

__all__ = [
    "adaptive_avg_pool2d", "add", "avg_pool2d", "batch_norm", "cat", "clamp", "clip", "concat",
    "constant", "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "div", "exp", "flatten",
    "global_avg_pool2d", "leaky_relu", "linear", "log", "log_softmax", "matmul", "max_pool2d",
    "mul", "neg", "permute", "relu", "relu6", "reshape", "sigmoid", "softmax", "sqrt", "sub",
    "tanh", "transpose",
]
# The ops of mobile CNNs and transformers live in their own module.
from .model_ops import *  # noqa: E402,F401,F403
from .model_ops import __all__ as _model_ops_all  # noqa: E402

__all__ += _model_ops_all
from lowerkit.tracing.train_ops import *  # noqa: E402,F401,F403  (dropout with a seed, one_hot)
from lowerkit.tracing.train_ops import __all__ as _train_ops_all  # noqa: E402

__all__ += _train_ops_all

Tensor = Any  # a TracedTensor, nn.Parameter or numpy array
IntOrPair = int | Sequence[int]


def _builder(fn: str) -> MethodBuilder:
    builder = current_builder()
    if builder is None:
        raise InputError(
            f"lowerkit.ops.{fn} was called outside lowerkit.trace; ops record graph nodes and "
            "have no eager mode. Trace the code that calls it and run the result: "
            "m = lowerkit.trace(fn_or_module, example_input); y = m(x)"
        )
    return builder


def _apply(fn: str, op: str, operands: Sequence[Any], attrs: dict[str, object] | None = None) -> TracedTensor:
    return _builder(fn).apply(op, operands, attrs)


def _type_of(fn: str, x: Any):
    return _builder(fn).value_of(x, what=f"{fn} input").type


def _pair(fn: str, name: str, value: IntOrPair) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return (int(value[0]), int(value[1]))
    raise InputError(f"lowerkit.ops.{fn}: {name} must be an int or a pair of ints, got {value!r}")


def _padding4(fn: str, value: IntOrPair) -> tuple[int, int, int, int]:
    """Padding as ``(top, left, bottom, right)`` from an int, ``(h, w)`` or a 4-tuple."""
    if isinstance(value, (tuple, list)) and len(value) == 4:
        return tuple(int(v) for v in value)  # type: ignore[return-value]
    if isinstance(value, (tuple, list)) and len(value) != 2:
        raise InputError(
            f"lowerkit.ops.{fn}: padding must be an int, (h, w) or (top, left, bottom, right), got {value!r}"
        )
    h, w = _pair(fn, "padding", value)
    return (h, w, h, w)


def _conv_attrs(fn: str, stride: IntOrPair, padding: Any, dilation: IntOrPair, groups: int) -> dict[str, object]:
    return {
        "stride": _pair(fn, "stride", stride),
        "padding": _padding4(fn, padding),
        "dilation": _pair(fn, "dilation", dilation),
        "groups": groups,
    }


# -- element-wise --------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> TracedTensor:
    """max(x, 0). ``inplace`` is accepted for torch compatibility and ignored."""
    return _apply("relu", "relu", [input])


def relu6(input: Tensor, inplace: bool = False) -> TracedTensor:
    """min(max(x, 0), 6)."""
    return _apply("relu6", "relu6", [input])


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> TracedTensor:
    """x if x >= 0 else negative_slope * x."""
    return _apply("leaky_relu", "leaky_relu", [input], {"negative_slope": negative_slope})


def sigmoid(input: Tensor) -> TracedTensor:
    return _apply("sigmoid", "sigmoid", [input])


def tanh(input: Tensor) -> TracedTensor:
    return _apply("tanh", "tanh", [input])


def exp(input: Tensor) -> TracedTensor:
    return _apply("exp", "exp", [input])


def log(input: Tensor) -> TracedTensor:
    return _apply("log", "log", [input])


def sqrt(input: Tensor) -> TracedTensor:
    return _apply("sqrt", "sqrt", [input])


def neg(input: Tensor) -> TracedTensor:
    return _apply("neg", "neg", [input])


def add(input: Tensor, other: Tensor | float) -> TracedTensor:
    """input + other with numpy broadcasting."""
    return _apply("add", "add", [input, other])


def sub(input: Tensor, other: Tensor | float) -> TracedTensor:
    return _apply("sub", "sub", [input, other])


def mul(input: Tensor, other: Tensor | float) -> TracedTensor:
    return _apply("mul", "mul", [input, other])


def div(input: Tensor, other: Tensor | float) -> TracedTensor:
    return _apply("div", "div", [input, other])


def matmul(input: Tensor, other: Tensor) -> TracedTensor:
    """numpy/torch matmul semantics."""
    return _apply("matmul", "matmul", [input, other])


def clip(input: Tensor, min: float | None = None, max: float | None = None) -> TracedTensor:
    """Clamp to ``[min, max]``; ``None`` leaves that side open (at least one is required)."""
    if min is None and max is None:
        raise InputError("lowerkit.ops.clip: give at least one of min and max")
    lo = float("-inf") if min is None else float(min)
    hi = float("inf") if max is None else float(max)
    return _apply("clip", "clip", [input], {"min": lo, "max": hi})


clamp = clip


# -- linear algebra and convolution ---------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> TracedTensor:
    """x @ weight.T + bias, weight of shape [out, in]."""
    operands = [input, weight] if bias is None else [input, weight, bias]
    return _apply("linear", "linear", operands)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntOrPair = 1,
    padding: IntOrPair | str = 0,
    dilation: IntOrPair = 1,
    groups: int = 1,
) -> TracedTensor:
    """2-D convolution (NCHW, weight [OC, IC/groups, KH, KW]).

    ``padding`` is an int, ``(h, w)``, ``(top, left, bottom, right)``, ``"valid"`` or
    ``"same"`` (stride 1 only; an odd total puts the extra row/column at the bottom/right).
    """
    if isinstance(padding, str):
        padding = _string_padding(weight, padding, stride, dilation)
    operands = [input, weight] if bias is None else [input, weight, bias]
    return _apply("conv2d", "conv2d", operands, _conv_attrs("conv2d", stride, padding, dilation, groups))


def _string_padding(weight: Tensor, padding: str, stride: IntOrPair, dilation: IntOrPair) -> tuple[int, ...]:
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding != "same":
        raise InputError(f"lowerkit.ops.conv2d: padding string must be 'valid' or 'same', got {padding!r}")
    if _pair("conv2d", "stride", stride) != (1, 1):
        raise InputError("lowerkit.ops.conv2d: padding='same' needs stride 1")
    kh, kw = _type_of("conv2d", weight).shape[2:4]
    dh, dw = _pair("conv2d", "dilation", dilation)
    th, tw = dh * (kh - 1), dw * (kw - 1)
    return (th // 2, tw // 2, th - th // 2, tw - tw // 2)


def _size4(fn: str, name: str, size: Sequence[int]) -> tuple[int, int, int, int]:
    if not isinstance(size, (tuple, list)) or len(size) != 4:
        raise InputError(f"lowerkit.ops.{fn}: {name} must be the 4-d shape [N, C, H, W], got {size!r}")
    return tuple(int(s) for s in size)  # type: ignore[return-value]


def conv2d_input_grad(
    input_size: Sequence[int],
    weight: Tensor,
    grad_output: Tensor,
    stride: IntOrPair = 1,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    groups: int = 1,
) -> TracedTensor:
    """Gradient of conv2d with respect to its input (``torch.nn.grad.conv2d_input``)."""
    attrs = _conv_attrs("conv2d_input_grad", stride, padding, dilation, groups)
    attrs["input_size"] = _size4("conv2d_input_grad", "input_size", input_size)
    return _apply("conv2d_input_grad", "conv2d_input_grad", [weight, grad_output], attrs)


def conv2d_weight_grad(
    input: Tensor,
    weight_size: Sequence[int],
    grad_output: Tensor,
    stride: IntOrPair = 1,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    groups: int = 1,
) -> TracedTensor:
    """Gradient of conv2d with respect to its weight (``torch.nn.grad.conv2d_weight``)."""
    attrs = _conv_attrs("conv2d_weight_grad", stride, padding, dilation, groups)
    attrs["weight_size"] = _size4("conv2d_weight_grad", "weight_size", weight_size)
    return _apply("conv2d_weight_grad", "conv2d_weight_grad", [input, grad_output], attrs)


# -- pooling and normalisation --------------------------------------------------------
def max_pool2d(
    input: Tensor,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> TracedTensor:
    """Max pooling; ``stride`` defaults to ``kernel_size``. ``return_indices`` is unsupported."""
    if return_indices:
        raise InputError("lowerkit.ops.max_pool2d: return_indices=True is not supported")
    attrs = {
        "kernel_size": _pair("max_pool2d", "kernel_size", kernel_size),
        "stride": _pair("max_pool2d", "stride", kernel_size if stride is None else stride),
        "padding": _padding4("max_pool2d", padding),
        "dilation": _pair("max_pool2d", "dilation", dilation),
        "ceil_mode": bool(ceil_mode),
    }
    return _apply("max_pool2d", "max_pool2d", [input], attrs)


def avg_pool2d(
    input: Tensor,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TracedTensor:
    """Average pooling; ``stride`` defaults to ``kernel_size``. ``divisor_override`` is unsupported."""
    if divisor_override is not None:
        raise InputError("lowerkit.ops.avg_pool2d: divisor_override is not supported")
    attrs = {
        "kernel_size": _pair("avg_pool2d", "kernel_size", kernel_size),
        "stride": _pair("avg_pool2d", "stride", kernel_size if stride is None else stride),
        "padding": _padding4("avg_pool2d", padding),
        "ceil_mode": bool(ceil_mode),
        "count_include_pad": bool(count_include_pad),
    }
    return _apply("avg_pool2d", "avg_pool2d", [input], attrs)


def global_avg_pool2d(input: Tensor) -> TracedTensor:
    """Mean over H and W: [N, C, H, W] -> [N, C, 1, 1]."""
    return _apply("global_avg_pool2d", "global_avg_pool2d", [input])


def adaptive_avg_pool2d(input: Tensor, output_size: IntOrPair) -> TracedTensor:
    """Only ``output_size`` 1 (or ``(1, 1)``) is supported: it is ``global_avg_pool2d``."""
    if _pair("adaptive_avg_pool2d", "output_size", output_size) != (1, 1):
        raise InputError(
            f"lowerkit.ops.adaptive_avg_pool2d: only output_size 1 is supported, got {output_size!r}"
        )
    return global_avg_pool2d(input)


def batch_norm(
    input: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> TracedTensor:
    """Inference batch norm with running statistics (torch's argument order; ``momentum``
    is ignored and ``training=True`` is unsupported). A missing weight/bias is a constant
    of ones/zeros."""
    if training:
        raise InputError("lowerkit.ops.batch_norm: only inference (training=False) is supported")
    builder = _builder("batch_norm")
    x_type = builder.value_of(input, what="batch_norm input").type
    mean_type = builder.value_of(running_mean, what="batch_norm running_mean").type
    if weight is None:
        weight = np.ones(mean_type.shape, dtype=x_type.numpy_dtype)
    if bias is None:
        bias = np.zeros(mean_type.shape, dtype=x_type.numpy_dtype)
    return builder.apply("batch_norm", [input, running_mean, running_var, weight, bias], {"eps": eps})


# -- shape ------------------------------------------------------------------------------
def flatten(input: Tensor, start_dim: int = 1, end_dim: int = -1) -> TracedTensor:
    """Merge dims ``start_dim..end_dim``. Note: ``start_dim`` defaults to 1 (as ``nn.Flatten``),
    not 0 as in ``torch.flatten``."""
    return _apply("flatten", "flatten", [input], {"start_dim": start_dim, "end_dim": end_dim})


def reshape(input: Tensor, shape: Sequence[int]) -> TracedTensor:
    """Reshape to ``shape`` (one entry may be -1)."""
    if not isinstance(shape, (tuple, list)):
        raise InputError(f"lowerkit.ops.reshape: shape must be a tuple of ints, got {shape!r}")
    return _apply("reshape", "reshape", [input], {"shape": tuple(int(s) for s in shape)})


def _norm_dim(fn: str, dim: int, rank: int) -> int:
    if not -rank <= dim < rank:
        raise InputError(f"lowerkit.ops.{fn}: dim {dim} is out of range for a rank-{rank} tensor")
    return dim % rank


def permute(input: Tensor, dims: Sequence[int]) -> TracedTensor:
    """Reorder dimensions (records ``transpose`` with ``perm=dims``)."""
    rank = _type_of("permute", input).rank
    perm = tuple(_norm_dim("permute", int(d), rank) for d in dims)
    if sorted(perm) != list(range(rank)):
        raise InputError(f"lowerkit.ops.permute: dims {list(dims)} is not a permutation of {rank} dims")
    return _apply("permute", "transpose", [input], {"perm": perm})


def transpose(input: Tensor, dim0: int, dim1: int) -> TracedTensor:
    """Swap two dimensions (records ``transpose`` with the full ``perm``)."""
    rank = _type_of("transpose", input).rank
    perm = list(range(rank))
    a, b = _norm_dim("transpose", dim0, rank), _norm_dim("transpose", dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return _apply("transpose", "transpose", [input], {"perm": tuple(perm)})


def concat(tensors: Sequence[Tensor], dim: int = 0) -> TracedTensor:
    """Concatenate along ``dim``."""
    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise InputError("lowerkit.ops.concat: expects a non-empty list or tuple of tensors")
    return _apply("concat", "concat", list(tensors), {"dim": dim})


cat = concat


def softmax(input: Tensor, dim: int = -1) -> TracedTensor:
    return _apply("softmax", "softmax", [input], {"dim": dim})


def log_softmax(input: Tensor, dim: int = -1) -> TracedTensor:
    return _apply("log_softmax", "log_softmax", [input], {"dim": dim})


def constant(array: Any) -> TracedTensor:
    """Record ``array`` (a numpy array or array-like) as a ``constant`` node."""
    builder = _builder("constant")
    return builder.wrap(builder.value_of(np.asarray(array), what="constant"))
