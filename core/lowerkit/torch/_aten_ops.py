"""One importer per ATen overload (core ATen after decomposition, plus the few kept whole).

An importer gets the :class:`~._importer.ImportContext` (positioned on the node) and the
node's arguments in ATen's order: tensors as traced lowerkit tensors, import-time constants
as numpy arrays, everything else as Python values. It calls :mod:`lowerkit.ops`, whose
functions have ``torch.nn.functional`` signatures, and returns the result (a tuple for
multi-output overloads, read by ``operator.getitem``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tracing import ops
from ._importer import ImportContext
from ._registry import aten


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x)) if isinstance(x, np.ndarray) else tuple(x.shape)


def _dim(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


def _dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(_dim(int(d), rank) for d in dims)


# -- plumbing --------------------------------------------------------------------------------------
@aten("operator.getitem")
def getitem(ctx: ImportContext, values: Any, index: int) -> Any:
    return values[index]


_INT_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
            "truediv": operator.truediv, "neg": operator.neg}


def _int_op(name: str):
    fn = _INT_OPS[name]

    def run(ctx: ImportContext, *args: Any) -> Any:
        return fn(*args)

    run.__name__ = f"int_{name}"
    return run


for _name in _INT_OPS:
    aten(f"operator.{_name}")(_int_op(_name))


@aten("aten.sym_size.int")
def sym_size(ctx: ImportContext, x: Any, dim: int) -> int:
    return _shape(x)[dim]


@aten("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
      "aten.contiguous.default", "aten._assert_tensor_metadata.default")
def identity(ctx: ImportContext, x: Any, *args: Any, **kwargs: Any) -> Any:
    return x


@aten("aten.dropout.default")
def dropout(ctx: ImportContext, x: Any, p: float = 0.5, train: bool = False) -> Any:
    if train:
        raise ctx.unsupported("dropout in training mode; export the model in eval mode")
    return x


@aten("aten._to_copy.default", "aten.to.dtype")
def to_copy(ctx: ImportContext, x: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
    if dtype is None or str(dtype) == f"torch.{np.dtype(x.dtype).name}":
        return x  # a copy (device, layout): nothing at inference
    target = getattr(np, str(dtype).removeprefix("torch."), None)
    if target is None or not hasattr(ops, "cast"):
        raise ctx.unsupported(f"a dtype conversion to {dtype}")
    return ops.cast(x, np.dtype(target))


# -- element-wise ----------------------------------------------------------------------------------
_UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
          "sqrt": "sqrt", "neg": "neg"}
def _unary(op: str):
    def run(ctx: ImportContext, x: Any) -> Any:
        return getattr(ops, op)(x)

    run.__name__ = op
    return run


for _name, _op in _UNARY.items():
    aten(f"aten.{_name}.default")(_unary(_op))


@aten("aten.rsqrt.default")
def rsqrt(ctx: ImportContext, x: Any) -> Any:
    return ops.div(np.ones((), dtype=x.dtype), ops.sqrt(x))


@aten("aten.erf.default", requires=("erf",))
def erf(ctx: ImportContext, x: Any) -> Any:
    return ops.erf(x)


def _binary(op: str):
    fn = getattr(ops, op)

    def run(ctx: ImportContext, a: Any, b: Any, alpha: Any = 1) -> Any:
        if alpha != 1:
            b = ops.mul(b, alpha) if not isinstance(b, (int, float)) else b * alpha
        if isinstance(a, (int, float)) and not isinstance(b, (int, float)):
            # a scalar on the left: a 0-d constant of b's dtype
            a = np.asarray(a, dtype=b.dtype)
        return fn(a, b)

    run.__name__ = op
    return run


for _name in ("add", "sub", "mul", "div"):
    aten(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_binary(_name))


@aten("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(ctx: ImportContext, a: Any, b: Any, alpha: Any = 1) -> Any:
    return _binary("sub")(ctx, b, a if alpha == 1 else ops.mul(a, alpha))


@aten("aten.pow.Tensor_Scalar")
def pow_scalar(ctx: ImportContext, x: Any, exponent: Any) -> Any:
    if exponent == 2:
        return ops.mul(x, x)
    if exponent == 0.5:
        return ops.sqrt(x)
    if exponent == 1:
        return x
    if exponent == -1:
        return ops.div(np.ones((), dtype=x.dtype), x)
    if hasattr(ops, "pow"):
        return ops.pow(x, exponent)
    raise ctx.unsupported(f"pow with exponent {exponent!r} (lowerkit imports 2, 0.5, 1 and -1)")


@aten("aten.pow.Tensor_Tensor", "aten.pow.Scalar", requires=("pow",))
def pow_tensor(ctx: ImportContext, x: Any, exponent: Any) -> Any:
    if isinstance(x, (int, float)):
        x = np.asarray(x, dtype=exponent.dtype)
    return ops.pow(x, exponent)


@aten("aten.where.self", requires=("where",))
def where(ctx: ImportContext, condition: Any, a: Any, b: Any) -> Any:
    return ops.where(condition, a, b)


@aten("aten.clamp.default", "aten.clip.default")
def clamp(ctx: ImportContext, x: Any, min: Any = None, max: Any = None) -> Any:
    if min is None and max is None:
        return x
    return ops.clip(x, None if min is None else float(min), None if max is None else float(max))


@aten("aten.clamp_min.default")
def clamp_min(ctx: ImportContext, x: Any, min: Any) -> Any:
    return ops.clip(x, float(min), None)


@aten("aten.clamp_max.default")
def clamp_max(ctx: ImportContext, x: Any, max: Any) -> Any:
    return ops.clip(x, None, float(max))


@aten("aten.hardtanh.default")
def hardtanh(ctx: ImportContext, x: Any, min_val: float = -1.0, max_val: float = 1.0) -> Any:
    if (min_val, max_val) == (0.0, 6.0):
        return ops.relu6(x)
    return ops.clip(x, float(min_val), float(max_val))


@aten("aten.leaky_relu.default")
def leaky_relu(ctx: ImportContext, x: Any, negative_slope: float = 0.01) -> Any:
    return ops.leaky_relu(x, float(negative_slope))


@aten("aten.hardswish.default", preserve=True, requires=("hardswish",))
def hardswish(ctx: ImportContext, x: Any) -> Any:
    return ops.hardswish(x)


@aten("aten.hardsigmoid.default", preserve=True, requires=("hardsigmoid",))
def hardsigmoid(ctx: ImportContext, x: Any) -> Any:
    return ops.hardsigmoid(x)


@aten("aten.silu.default", preserve=True, requires=("silu",))
def silu(ctx: ImportContext, x: Any) -> Any:
    return ops.silu(x)


@aten("aten.gelu.default", preserve=True, requires=("gelu",))
def gelu(ctx: ImportContext, x: Any, approximate: str = "none") -> Any:
    return ops.gelu(x, approximate=approximate)


@aten("aten._softmax.default")
def softmax(ctx: ImportContext, x: Any, dim: int, half_to_float: bool = False) -> Any:
    return ops.softmax(x, dim=_dim(dim, len(_shape(x))))


@aten("aten._log_softmax.default")
def log_softmax(ctx: ImportContext, x: Any, dim: int, half_to_float: bool = False) -> Any:
    return ops.log_softmax(x, dim=_dim(dim, len(_shape(x))))


# -- convolution, normalisation, linear ------------------------------------------------------------
@aten("aten.convolution.default")
def convolution(
    ctx: ImportContext, x: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
) -> Any:
    if len(_shape(x)) != 4:
        raise ctx.unsupported(f"a {len(_shape(x)) - 2}-D convolution; lowerkit has 2-D convolutions")
    if transposed:
        if not hasattr(ops, "conv_transpose2d"):
            raise ctx.unsupported("a transposed convolution needs lowerkit.ops.conv_transpose2d")
        return ops.conv_transpose2d(x, weight, bias, stride=tuple(stride), padding=tuple(padding),
                                    output_padding=tuple(output_padding), groups=groups, dilation=tuple(dilation))
    return ops.conv2d(x, weight, bias, stride=tuple(stride), padding=tuple(padding),
                      dilation=tuple(dilation), groups=groups)


@aten("aten._native_batch_norm_legit_no_training.default")
def batch_norm(ctx: ImportContext, x: Any, weight: Any, bias: Any, mean: Any, var: Any,
               momentum: float, eps: float) -> tuple:
    return (ops.batch_norm(x, mean, var, weight, bias, eps=float(eps)), None, None)


@aten("aten.native_layer_norm.default", requires=("layer_norm",))
def layer_norm(ctx: ImportContext, x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any,
               eps: float) -> tuple:
    return (ops.layer_norm(x, tuple(normalized_shape), weight, bias, float(eps)), None, None)


@aten("aten.native_group_norm.default", requires=("group_norm",))
def group_norm(ctx: ImportContext, x: Any, weight: Any, bias: Any, n: int, c: int, hw: int, group: int,
               eps: float) -> tuple:
    return (ops.group_norm(x, int(group), weight, bias, float(eps)), None, None)


@aten("aten.linear.default", preserve=True)
def linear(ctx: ImportContext, x: Any, weight: Any, bias: Any = None) -> Any:
    return ops.linear(x, weight, bias)


@aten("aten.addmm.default")
def addmm(ctx: ImportContext, bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    product = ops.matmul(a, b)
    if alpha != 1:
        product = ops.mul(product, alpha)
    if beta != 1:
        bias = ops.mul(bias, beta)
    return ops.add(product, bias)


@aten("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def matmul(ctx: ImportContext, a: Any, b: Any) -> Any:
    return ops.matmul(a, b)


@aten("aten.scaled_dot_product_attention.default", preserve=True, requires=("scaled_dot_product_attention",))
def sdpa(ctx: ImportContext, q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    if enable_gqa:
        raise ctx.unsupported("grouped-query attention (enable_gqa=True)")
    return ops.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0, is_causal=is_causal,
                                            scale=scale)


# -- pooling and resizing --------------------------------------------------------------------------
@aten("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(ctx: ImportContext, x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    stride = stride if stride else kernel_size
    return (ops.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode), None)


@aten("aten.max_pool2d.default", preserve=True)
def max_pool2d(ctx: ImportContext, x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False) -> Any:
    return max_pool2d_with_indices(ctx, x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@aten("aten.avg_pool2d.default")
def avg_pool2d(ctx: ImportContext, x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    if divisor_override is not None:
        raise ctx.unsupported("avg_pool2d with divisor_override")
    stride = stride if stride else kernel_size
    return ops.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad)


@aten("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(ctx: ImportContext, x: Any, output_size: Sequence[int]) -> Any:
    size = tuple(output_size)
    if size == (1, 1):
        return ops.global_avg_pool2d(x)
    if size == _shape(x)[-2:]:
        return x
    raise ctx.unsupported(f"adaptive average pooling to {list(size)}; lowerkit pools to 1x1 (global)")


@aten("aten.mean.dim", "aten.mean.default")
def mean(ctx: ImportContext, x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    rank = len(_shape(x))
    dims = _dims(dim, rank)
    if rank == 4 and dims == [2, 3]:  # spatial mean: the global pooling every CNN backend has
        y = ops.global_avg_pool2d(x)
        return y if keepdim else ops.reshape(y, _shape(y)[:2])
    if not hasattr(ops, "mean"):
        raise ctx.unsupported(f"mean over dims {dims} needs lowerkit.ops.mean")
    return ops.mean(x, dim=tuple(dims), keepdim=keepdim)


def _reduction(name: str):
    def run(ctx: ImportContext, x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
        dims = _dims(dim, len(_shape(x)))
        return getattr(ops, name)(x, dim=tuple(dims), keepdim=keepdim)

    run.__name__ = name
    return run


aten("aten.sum.dim_IntList", "aten.sum.default", requires=("sum",))(_reduction("sum"))
aten("aten.amax.default", requires=("amax",))(_reduction("amax"))
aten("aten.amin.default", requires=("amin",))(_reduction("amin"))


_PAD_MODES = {"aten.constant_pad_nd.default": "constant", "aten.reflection_pad2d.default": "reflect",
              "aten.replication_pad2d.default": "replicate"}


@aten("aten.constant_pad_nd.default", requires=("pad",))
def constant_pad(ctx: ImportContext, x: Any, pad: Sequence[int], value: float = 0.0) -> Any:
    return ops.pad(x, tuple(pad), mode="constant", value=float(value))


@aten("aten.reflection_pad2d.default", "aten.replication_pad2d.default", requires=("pad",))
def mode_pad(ctx: ImportContext, x: Any, pad: Sequence[int]) -> Any:
    mode = "reflect" if "reflection" in str(ctx.node.target) else "replicate"
    return ops.pad(x, tuple(pad), mode=mode)


@aten("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d.default", preserve=True, requires=("interpolate",))
def upsample_nearest(ctx: ImportContext, x: Any, output_size: Any = None, scale_factors: Any = None,
                     *rest: Any) -> Any:
    size = tuple(output_size) if output_size else None
    if size is None:
        size = tuple(int(math.floor(s * f)) for s, f in zip(_shape(x)[2:], scale_factors))
    return ops.interpolate(x, size=size, mode="nearest")


@aten("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default", preserve=True, requires=("interpolate",))
def upsample_bilinear(ctx: ImportContext, x: Any, output_size: Any, align_corners: bool,
                      scale_factors: Any = None, *rest: Any) -> Any:
    size = tuple(output_size) if output_size else None
    if size is None:
        size = tuple(int(math.floor(s * f)) for s, f in zip(_shape(x)[2:], scale_factors))
    return ops.interpolate(x, size=size, mode="bilinear", align_corners=bool(align_corners))
