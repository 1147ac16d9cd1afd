"""Derivative entries of the layer ops: convolutions, linear algebra, normalisation,
softmaxes, pooling and dropout.

Convolutions go through ``conv2d_input_grad`` / ``conv2d_weight_grad`` (which backends
such as nnpack run); each of those is linear in both inputs, so they have entries too.
"""

from __future__ import annotations

from .table import derivative

_GEOMETRY = ("stride", "padding", "dilation", "groups")


def _geometry(d) -> dict:
    return {k: d.attrs[k] for k in _GEOMETRY}


def _channel_sum(d, v):
    """Sum of ``v`` over every dim but 1, as a ``[C]`` vector."""
    c = v.type.shape[1]
    return d.reshape(d.sum_to(v, (1, c) + (1,) * (v.type.rank - 2)), (c,))


def _bias_grad(d):
    """The gradient of a per-channel bias."""
    return _channel_sum(d, d.grad)


# -- convolutions -----------------------------------------------------------------------------
derivative(
    "conv2d",
    x=lambda d: d.emit("conv2d_input_grad", d.weight, d.grad, input_size=d.x.type.shape, **_geometry(d)),
    weight=lambda d: d.emit("conv2d_weight_grad", d.x, d.grad, weight_size=d.weight.type.shape, **_geometry(d)),
    bias=_bias_grad,
    doc="conv2d_input_grad, conv2d_weight_grad; bias: g summed over N, H, W",
)
derivative(
    "conv2d_input_grad",
    weight=lambda d: d.emit("conv2d_weight_grad", d.grad, d.grad_output, weight_size=d.weight.type.shape,
                            **_geometry(d)),
    grad_output=lambda d: d.emit("conv2d", d.grad, d.weight, **_geometry(d)),
    doc="linear in both: conv2d_weight_grad(g, grad_output), conv2d(g, weight)",
)
derivative(
    "conv2d_weight_grad",
    input=lambda d: d.emit("conv2d_input_grad", d.grad, d.grad_output, input_size=d.input.type.shape,
                           **_geometry(d)),
    grad_output=lambda d: d.emit("conv2d", d.input, d.grad, **_geometry(d)),
    doc="linear in both: conv2d_input_grad(g, grad_output), conv2d(input, g)",
)
derivative(
    "conv_transpose2d",
    x=lambda d: d.emit("conv2d", d.grad, d.weight, **_geometry(d)),
    weight=lambda d: d.emit("conv2d_weight_grad", d.grad, d.x, weight_size=d.weight.type.shape, **_geometry(d)),
    bias=_bias_grad,
    doc="conv2d(g, weight), conv2d_weight_grad(g, x); bias: g summed over N, H, W",
)


# -- linear algebra ---------------------------------------------------------------------------
def _matmul_operands(d):
    """a and b as matrices (1-D operands promoted) and grad with the promoted dims restored."""
    a, b, g = d.a, d.b, d.grad
    a2 = d.reshape(a, (1,) + a.type.shape) if a.type.rank == 1 else a
    b2 = d.reshape(b, b.type.shape + (1,)) if b.type.rank == 1 else b
    batch = g.type.shape[: max(a2.type.rank, b2.type.rank) - 2]
    g2 = d.reshape(g, batch + (a2.type.shape[-2], b2.type.shape[-1]))
    return a2, b2, g2


def _matmul_a(d):
    a2, b2, g2 = _matmul_operands(d)
    return d.reshape(d.sum_to(d.emit("matmul", g2, d.swap_last(b2)), a2), d.a.type.shape)


def _matmul_b(d):
    a2, b2, g2 = _matmul_operands(d)
    return d.reshape(d.sum_to(d.emit("matmul", d.swap_last(a2), g2), b2), d.b.type.shape)


def _linear_weight(d):
    out_features, in_features = d.weight.type.shape
    g2 = d.reshape(d.grad, (-1, out_features))
    x2 = d.reshape(d.x, (-1, in_features))
    return d.emit("matmul", d.swap_last(g2), x2)


derivative("matmul", a=_matmul_a, b=_matmul_b,
           doc="g @ b^T, a^T @ g (1-D operands promoted, batch dims summed)")
derivative(
    "linear",
    x=lambda d: d.emit("matmul", d.grad, d.weight),
    weight=_linear_weight,
    bias=lambda d: d.sum_to(d.grad, d.bias),
    doc="g @ weight, g^T @ x (leading dims flattened), g summed to [out]",
)


# -- normalisation ----------------------------------------------------------------------------
def _bn_inv_std(d):
    var = d.running_var
    return d.div(d.const(1.0, var), d.emit("sqrt", d.add(var, d.const(d.attrs["eps"], var))))


def _bn_centered(d):
    return d.sub(d.x, d.per_channel(d.running_mean, d.x.type.rank))


derivative(
    "batch_norm",
    x=lambda d: d.mul(d.grad, d.per_channel(d.mul(d.weight, _bn_inv_std(d)), d.x.type.rank)),
    running_mean=lambda d: d.neg(d.mul(_channel_sum(d, d.grad), d.mul(d.weight, _bn_inv_std(d)))),
    running_var=lambda d: d.mul(
        _channel_sum(d, d.mul(d.grad, _bn_centered(d))),
        d.scale(d.mul(d.weight, d.mul(_bn_inv_std(d), d.mul(_bn_inv_std(d), _bn_inv_std(d)))), -0.5),
    ),
    weight=lambda d: d.mul(_channel_sum(d, d.mul(d.grad, _bn_centered(d))), _bn_inv_std(d)),
    bias=lambda d: _channel_sum(d, d.grad),
    doc="inference form: running statistics are inputs",
)
derivative(
    "batch_norm_train",
    {("x", "weight", "bias"): lambda d: d.emit(
        "batch_norm_train_grad", d.x, d.weight, d.outs[1], d.outs[2], d.grad, eps=d.attrs["eps"])},
    doc="training form; the batch statistics it returns carry no gradient",
)
derivative(
    "layer_norm",
    {("x", "weight", "bias"): lambda d: d.emit(
        "layer_norm_grad", d.x, d.grad, *([d.weight] if d.has("weight") else []),
        axis=d.attrs["axis"], eps=d.attrs["eps"])},
    doc="layer_norm_grad",
)
derivative(
    "group_norm",
    {("x", "weight", "bias"): lambda d: d.emit(
        "group_norm_grad", d.x, d.grad, *([d.weight] if d.has("weight") else []),
        num_groups=d.attrs["num_groups"], eps=d.attrs["eps"])},
    doc="group_norm_grad",
)

# -- softmaxes, pooling, dropout ----------------------------------------------------------------
def _global_avg_pool(d):
    h, w = d.x.type.shape[2:]
    return d.expand(d.scale(d.grad, 1.0 / (h * w)), d.x.type.shape)


derivative("softmax", x=lambda d: d.emit("softmax_grad", d.out, d.grad, dim=d.attrs["dim"]),
           doc="softmax_grad(out, g)")
derivative("log_softmax", x=lambda d: d.emit("log_softmax_grad", d.out, d.grad, dim=d.attrs["dim"]),
           doc="log_softmax_grad(out, g)")
derivative("max_pool2d", x=lambda d: d.emit("max_pool2d_grad", d.x, d.grad, **d.attrs),
           doc="max_pool2d_grad: to each window's first maximum")
derivative("avg_pool2d", x=lambda d: d.emit("avg_pool2d_grad", d.grad, input_size=d.x.type.shape, **d.attrs),
           doc="avg_pool2d_grad")
derivative("global_avg_pool2d", x=_global_avg_pool, doc="g / (H*W), expanded")
derivative("interpolate", x=lambda d: d.emit("interpolate_grad", d.grad, input_size=d.x.type.shape, **d.attrs),
           doc="interpolate_grad: the per-dim maps transposed")
derivative("dropout", x=lambda d: d.emit("dropout", d.grad, d.seed, **d.attrs), nondifferentiable=("seed",),
           doc="dropout of g with the same seed")
