"""Derivative entries of the element-wise ops and activations.

Binary ops broadcast, so each operand's gradient is summed back to its own shape (``sum_to``).
In the docs, ``g`` is the incoming gradient and ``out`` the op's output.
"""

from __future__ import annotations

import math

from .table import derivative


def _silu(d):
    """d/dx x*s(x) = s * (1 + x * (1 - s))."""
    s = d.emit("sigmoid", d.x)
    one = d.const(1.0, d.x)
    return d.mul(d.grad, d.mul(s, d.add(one, d.mul(d.x, d.sub(one, s)))))


def _pow_base(d):
    return d.sum_to(d.mul(d.grad, d.mul(d.b, d.emit("pow", d.a, d.sub(d.b, d.const(1.0, d.b))))), d.a)


# -- binary, with broadcasting ------------------------------------------------------------------
derivative("add", a=lambda d: d.sum_to(d.grad, d.a), b=lambda d: d.sum_to(d.grad, d.b),
           doc="g summed to each operand's shape")
derivative("sub", a=lambda d: d.sum_to(d.grad, d.a), b=lambda d: d.sum_to(d.neg(d.grad), d.b),
           doc="g, -g (summed to each shape)")
derivative("mul", a=lambda d: d.sum_to(d.mul(d.grad, d.b), d.a), b=lambda d: d.sum_to(d.mul(d.grad, d.a), d.b),
           doc="g*b, g*a")
derivative("div", a=lambda d: d.sum_to(d.div(d.grad, d.b), d.a),
           b=lambda d: d.sum_to(d.neg(d.div(d.mul(d.grad, d.out), d.b)), d.b),
           doc="g/b, -g*out/b")
derivative("pow", a=_pow_base, b=lambda d: d.sum_to(d.mul(d.grad, d.mul(d.out, d.emit("log", d.a))), d.b),
           doc="g*b*a^(b-1), g*out*log(a)")
derivative("where", a=lambda d: d.sum_to(d.emit("where", d.condition, d.grad, d.const(0.0, d.grad)), d.a),
           b=lambda d: d.sum_to(d.emit("where", d.condition, d.const(0.0, d.grad), d.grad), d.b),
           nondifferentiable=("condition",), doc="where(c, g, 0), where(c, 0, g)")

# -- smooth unary ---------------------------------------------------------------------------------
derivative("neg", x=lambda d: d.neg(d.grad), doc="-g")
derivative("exp", x=lambda d: d.mul(d.grad, d.out), doc="g*out")
derivative("log", x=lambda d: d.div(d.grad, d.x), doc="g/x")
derivative("sqrt", x=lambda d: d.div(d.grad, d.scale(d.out, 2.0)), doc="g/(2*out)")
derivative("sigmoid", x=lambda d: d.mul(d.grad, d.mul(d.out, d.sub(d.const(1.0, d.out), d.out))),
           doc="g*out*(1-out)")
derivative("tanh", x=lambda d: d.mul(d.grad, d.sub(d.const(1.0, d.out), d.mul(d.out, d.out))),
           doc="g*(1-out^2)")
derivative("erf", x=lambda d: d.mul(d.grad, d.scale(d.emit("exp", d.neg(d.mul(d.x, d.x))), 2 / math.sqrt(math.pi))),
           doc="g*2/sqrt(pi)*exp(-x^2)")
derivative("silu", x=_silu, doc="g*s*(1+x*(1-s)), s = sigmoid(x)")

# -- piecewise activations: one backward op each ------------------------------------------------
derivative("relu", x=lambda d: d.emit("relu_grad", d.x, d.grad), doc="relu_grad")
derivative("relu6", x=lambda d: d.emit("clip_grad", d.x, d.grad, min=0.0, max=6.0), doc="clip_grad(0, 6)")
derivative("clip", x=lambda d: d.emit("clip_grad", d.x, d.grad, min=d.attrs["min"], max=d.attrs["max"]),
           doc="clip_grad")
derivative("leaky_relu", x=lambda d: d.emit("leaky_relu_grad", d.x, d.grad, negative_slope=d.attrs["negative_slope"]),
           doc="leaky_relu_grad")
derivative("hardsigmoid",
           x=lambda d: d.emit("hardsigmoid_grad", d.x, d.grad, alpha=d.attrs["alpha"], beta=d.attrs["beta"]),
           doc="hardsigmoid_grad")
derivative("hardswish", x=lambda d: d.emit("hardswish_grad", d.x, d.grad), doc="hardswish_grad")
derivative("gelu", x=lambda d: d.emit("gelu_grad", d.x, d.grad, approximate=d.attrs["approximate"]),
           doc="gelu_grad")
derivative("cast", x=lambda d: d.emit("cast", d.grad, dtype=d.x.type.dtype), doc="g cast back to x's dtype")
