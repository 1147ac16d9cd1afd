"""Cases for the derivatives table: (op, inputs, attributes, the same op in PyTorch).

Every derivative entry has cases sweeping shapes and attributes; inputs are small so that
float64 finite differences over the same cases stay fast. Inputs of ``log``/``sqrt``/``pow``
are positive, and piecewise ops avoid their kinks by construction of random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

torch = __import__("pytest").importorskip("torch")
F = torch.nn.functional


@dataclass
class Case:
    id: str
    op: str
    inputs: list[np.ndarray]
    attrs: dict
    torch_fn: Callable[..., Any]


_rng = np.random.default_rng(1234)


def r(*shape, low=None):
    a = _rng.standard_normal(shape).astype(np.float32)
    if low is not None:
        a = (np.abs(a) + low).astype(np.float32)
    return a


def tpad(x, padding):
    top, left, bottom, right = padding
    return F.pad(x, (left, right, top, bottom))


CASES: list[Case] = []


def case(id_: str, op: str, inputs, attrs, fn) -> None:
    CASES.append(Case(f"{op}-{id_}", op, list(inputs), dict(attrs), fn))


# -- element-wise -------------------------------------------------------------------------------
for shapes in [((3, 4), (3, 4)), ((2, 1, 5), (4, 1)), ((5,), (2, 3, 5))]:
    sid = "x".join(map(str, shapes[0])) + "_" + "x".join(map(str, shapes[1]))
    case(sid, "add", [r(*shapes[0]), r(*shapes[1])], {}, torch.add)
    case(sid, "sub", [r(*shapes[0]), r(*shapes[1])], {}, torch.sub)
    case(sid, "mul", [r(*shapes[0]), r(*shapes[1])], {}, torch.mul)
    case(sid, "div", [r(*shapes[0]), r(*shapes[1], low=0.5)], {}, torch.div)
    case(sid, "pow", [r(*shapes[0], low=0.5), r(*shapes[1])], {}, torch.pow)
    cond = _rng.random(shapes[0]) > 0.5
    case(sid, "where", [cond, r(*shapes[0]), r(*shapes[1])], {}, torch.where)

for shape in [(7,), (2, 3, 4)]:
    sid = "x".join(map(str, shape))
    case(sid, "neg", [r(*shape)], {}, torch.neg)
    case(sid, "exp", [r(*shape)], {}, torch.exp)
    case(sid, "log", [r(*shape, low=0.2)], {}, torch.log)
    case(sid, "sqrt", [r(*shape, low=0.2)], {}, torch.sqrt)
    case(sid, "sigmoid", [r(*shape)], {}, torch.sigmoid)
    case(sid, "tanh", [r(*shape)], {}, torch.tanh)
    case(sid, "erf", [r(*shape)], {}, torch.erf)
    case(sid, "silu", [r(*shape)], {}, F.silu)
    case(sid, "relu", [r(*shape)], {}, F.relu)
    case(sid, "relu6", [r(*shape) * 4], {}, F.relu6)
    case(sid, "hardswish", [r(*shape) * 3], {}, F.hardswish)
    case(sid, "hardsigmoid", [r(*shape) * 3], {}, F.hardsigmoid)
    case(sid + "-none", "gelu", [r(*shape)], {"approximate": "none"}, F.gelu)
    case(sid + "-tanh", "gelu", [r(*shape)], {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh"))
case("bounds", "clip", [r(3, 5)], {"min": -0.5, "max": 0.7}, lambda x: torch.clamp(x, -0.5, 0.7))
case("low", "clip", [r(3, 5)], {"min": -0.5}, lambda x: torch.clamp(x, min=-0.5))
case("0.2", "leaky_relu", [r(3, 5)], {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2))
case("default", "leaky_relu", [r(4)], {}, F.leaky_relu)

# -- convolutions ---------------------------------------------------------------------------------
CONVS = [  # (x shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 8, 7), (6, 2, 3, 2), (2, 1), (0, 1, 2, 0), (1, 1), 2),
    ((2, 4, 9, 9), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),
    ((1, 2, 9, 8), (3, 2, 3, 3), (1, 2), (2, 2, 2, 2), (2, 2), 1),
    ((1, 3, 5, 5), (2, 3, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]
for i, (xs, ws, stride, padding, dilation, groups) in enumerate(CONVS):
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}

    def conv(x, w, b=None, attrs=attrs):
        return F.conv2d(tpad(x, attrs["padding"]), w, b, attrs["stride"], 0, attrs["dilation"], attrs["groups"])

    case(f"{i}-bias", "conv2d", [r(*xs), r(*ws), r(ws[0])], attrs, conv)
    case(f"{i}", "conv2d", [r(*xs), r(*ws)], attrs, conv)
    if padding[0] == padding[2] and padding[1] == padding[3]:
        oh = (xs[2] + 2 * padding[0] - dilation[0] * (ws[2] - 1) - 1) // stride[0] + 1
        ow = (xs[3] + 2 * padding[1] - dilation[1] * (ws[3] - 1) - 1) // stride[1] + 1
        go = r(xs[0], ws[0], oh, ow)
        sym = (padding[0], padding[1])
        case(f"{i}", "conv2d_input_grad", [r(*ws), go], {**attrs, "input_size": xs},
             lambda w, g, xs=xs, a=attrs, sym=sym: torch.nn.grad.conv2d_input(
                 xs, w, g, a["stride"], sym, a["dilation"], a["groups"]))
        case(f"{i}", "conv2d_weight_grad", [r(*xs), go], {**attrs, "weight_size": ws},
             lambda x, g, ws=ws, a=attrs: _weight_grad(x, ws, g, a))


def _weight_grad(x, ws, g, a):
    # d/dw <conv2d(x, w), g> evaluated with create_graph so it stays differentiable in x and g
    w = torch.zeros(ws, dtype=x.dtype, requires_grad=True)
    y = F.conv2d(tpad(x, a["padding"]), w, None, a["stride"], 0, a["dilation"], a["groups"])
    (gw,) = torch.autograd.grad((y * g).sum(), w, create_graph=True)
    return gw


for i, (xs, ws, stride, pad, output_padding, dilation, groups) in enumerate([
    ((1, 4, 4, 5), (4, 3, 3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 1),
    ((2, 4, 3, 3), (4, 1, 2, 2), (1, 1), (0, 0), (0, 0), (2, 1), 2),
]):
    attrs = {"stride": stride, "padding": (pad[0], pad[1], pad[0], pad[1]), "output_padding": output_padding,
             "dilation": dilation, "groups": groups}
    case(f"{i}", "conv_transpose2d", [r(*xs), r(*ws), r(ws[1] * groups)], attrs,
         lambda x, w, b, s=stride, p=pad, op=output_padding, g=groups, d=dilation:
         F.conv_transpose2d(x, w, b, s, p, op, g, d))

# -- linear algebra -----------------------------------------------------------------------------
for a, b in [((3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((5,), (5,))]:
    case(f"{a}@{b}".replace(" ", ""), "matmul", [r(*a), r(*b)], {}, torch.matmul)
case("2d-bias", "linear", [r(3, 4), r(5, 4), r(5)], {}, F.linear)
case("3d", "linear", [r(2, 3, 4), r(5, 4)], {}, F.linear)
case("1d-bias", "linear", [r(4), r(2, 4), r(2)], {}, F.linear)

# -- normalisation --------------------------------------------------------------------------------
for shape in [(2, 3, 4, 5), (4, 3)]:
    c = shape[1]
    case(f"{len(shape)}d", "batch_norm", [r(*shape), r(c), r(c, low=0.5), r(c), r(c)], {"eps": 1e-3},
         lambda x, m, v, w, b: _bn_eval(x, m, v, w, b))
    case(f"{len(shape)}d", "batch_norm_train", [r(*shape), r(c), r(c)], {"eps": 1e-5},
         lambda x, w, b: _bn_train(x, w, b))


def _bn_eval(x, m, v, w, b):
    # written out: torch's batch_norm does not differentiate its running statistics
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return (x - m.reshape(shape)) / torch.sqrt(v.reshape(shape) + 1e-3) * w.reshape(shape) + b.reshape(shape)


def _bn_train(x, w, b):
    dims = [0] + list(range(2, x.dim()))
    y = F.batch_norm(x, None, None, w, b, True, 0.0, 1e-5)
    return y, x.mean(dims).detach(), x.var(dims, unbiased=False).detach()


for shape, axis in [((2, 3, 4), -1), ((2, 3, 4), 1), ((5, 6), 0)]:
    norm = shape[axis % len(shape):]
    case(f"{shape}-{axis}-affine".replace(" ", ""), "layer_norm", [r(*shape), r(*norm), r(*norm)], {"axis": axis},
         lambda x, w, b, n=norm: F.layer_norm(x, n, w, b))
    case(f"{shape}-{axis}".replace(" ", ""), "layer_norm", [r(*shape)], {"axis": axis},
         lambda x, n=norm: F.layer_norm(x, n))
case("affine", "group_norm", [r(2, 6, 3, 2), r(6), r(6)], {"num_groups": 3}, lambda x, w, b: F.group_norm(x, 3, w, b))
case("plain", "group_norm", [r(2, 4, 5)], {"num_groups": 2}, lambda x: F.group_norm(x, 2))

# -- softmax, pooling -----------------------------------------------------------------------------
for shape, dim in [((3, 5), -1), ((2, 3, 4), 1), ((6,), 0)]:
    case(f"{shape}-{dim}".replace(" ", ""), "softmax", [r(*shape)], {"dim": dim}, lambda x, d=dim: F.softmax(x, d))
    case(f"{shape}-{dim}".replace(" ", ""), "log_softmax", [r(*shape)], {"dim": dim},
         lambda x, d=dim: F.log_softmax(x, d))
for i, (shape, k, s, p, dil, ceil) in enumerate([
    ((2, 3, 6, 6), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 2, 7, 8), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 7, 7), (3, 2), (2, 1), (1, 0), (1, 1), True),
    ((1, 1, 9, 9), (2, 2), (1, 1), (1, 1), (2, 2), False),
    ((1, 2, 5, 5), (3, 3), (1, 1), (1, 1), (1, 1), False),  # overlapping windows share maxima
]):
    attrs = {"kernel_size": k, "stride": s, "padding": (p[0], p[1], p[0], p[1]), "dilation": dil, "ceil_mode": ceil}
    case(str(i), "max_pool2d", [r(*shape)], attrs,
         lambda x, k=k, s=s, p=p, d=dil, c=ceil: F.max_pool2d(x, k, s, p, d, ceil_mode=c))
for i, (shape, k, s, p, ceil, cip) in enumerate([
    ((2, 3, 6, 6), (2, 2), (2, 2), (0, 0), False, True),
    ((1, 2, 7, 8), (3, 3), (2, 2), (1, 1), False, True),
    ((1, 2, 7, 8), (3, 3), (2, 2), (1, 1), False, False),
    ((1, 2, 7, 7), (3, 2), (2, 1), (1, 0), True, True),
    ((1, 1, 8, 8), (3, 3), (2, 2), (1, 1), True, False),
]):
    attrs = {"kernel_size": k, "stride": s, "padding": (p[0], p[1], p[0], p[1]), "ceil_mode": ceil,
             "count_include_pad": cip}
    case(str(i), "avg_pool2d", [r(*shape)], attrs,
         lambda x, k=k, s=s, p=p, c=ceil, cip=cip: F.avg_pool2d(x, k, s, p, c, cip))
case("1", "global_avg_pool2d", [r(2, 3, 4, 5)], {}, lambda x: F.adaptive_avg_pool2d(x, 1))

# -- shape and indexing -------------------------------------------------------------------------------
case("1", "flatten", [r(2, 3, 4)], {"start_dim": 1}, lambda x: torch.flatten(x, 1))
case("all", "flatten", [r(2, 3, 4)], {"start_dim": 0}, lambda x: torch.flatten(x))
case("1", "reshape", [r(2, 3, 4)], {"shape": (4, -1)}, lambda x: x.reshape(4, -1))
case("1", "transpose", [r(2, 3, 4)], {"perm": (2, 0, 1)}, lambda x: x.permute(2, 0, 1))
case("1", "expand", [r(3, 1)], {"shape": (2, 3, 4)}, lambda x: x.expand(2, 3, 4))
case("1", "sum_to_shape", [r(2, 3, 4)], {"shape": (3, 1)}, lambda x: x.sum(0).sum(-1, keepdim=True))
case("3", "concat", [r(2, 3), r(2, 1), r(2, 2)], {"dim": 1}, lambda *xs: torch.cat(xs, 1))
case("1", "concat", [r(2, 3)], {"dim": 0}, lambda x: torch.cat([x], 0))
case("3", "split", [r(2, 6)], {"dim": 1, "sizes": (1, 3, 2)}, lambda x: torch.split(x, [1, 3, 2], 1))
case("1", "slice", [r(4, 6)], {"starts": (1,), "ends": (5,), "axes": (1,), "steps": (2,)}, lambda x: x[:, 1:5:2])
case("2", "slice", [r(4, 6)], {"starts": (-1, 0), "ends": (-5, 3), "axes": (0, 1), "steps": (-1, 1)},
     lambda x: torch.flip(x, [0])[0:4, 0:3])
for mode, tmode in [("constant", "constant"), ("reflect", "reflect"), ("replicate", "replicate")]:
    case(mode, "pad", [r(1, 2, 4, 5)], {"pads": (0, 0, 1, 2, 0, 0, 2, 1), "mode": mode},
         lambda x, m=tmode: F.pad(x, (2, 1, 1, 2), mode=m))
case("1d", "gather", [r(4, 5)], {"dim": 1, "indices": np.array([0, 3, 3, 1])},
     lambda x: x[:, torch.tensor([0, 3, 3, 1])])
case("2d", "gather", [r(4, 5)], {"dim": 0, "indices": np.array([[0, 3], [2, 0]])},
     lambda x: x[torch.tensor([[0, 3], [2, 0]])])
for op, fn in [("reduce_sum", torch.sum), ("reduce_mean", torch.mean)]:
    case("1-keep", op, [r(2, 3, 4)], {"dims": (1,), "keepdim": True}, lambda x, fn=fn: fn(x, 1, keepdim=True))
    case("02", op, [r(2, 3, 4)], {"dims": (0, -1)}, lambda x, fn=fn: fn(x, (0, 2)))
    case("all", op, [r(2, 3)], {}, lambda x, fn=fn: fn(x))
for op, fn in [("reduce_max", torch.amax), ("reduce_min", torch.amin)]:
    case("1", op, [r(2, 3, 4)], {"dims": (1,)}, lambda x, fn=fn: fn(x, 1))
    case("ties", op, [np.array([[1, 3, 3], [2, 2, 0]], np.float32)], {"dims": (1,), "keepdim": True},
         lambda x, fn=fn: fn(x, 1, keepdim=True))

# -- resizing -------------------------------------------------------------------------------------
for i, (hw, kwargs, attrs) in enumerate([
    ((4, 5), {"scale_factor": 2, "mode": "nearest"}, {"size": (8, 10), "scales": (2.0, 2.0)}),
    ((5, 7), {"size": (3, 4), "mode": "nearest"}, {"size": (3, 4), "scales": (3 / 5, 4 / 7)}),
    ((4, 5), {"scale_factor": 2, "mode": "bilinear"},
     {"size": (8, 10), "scales": (2.0, 2.0), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((6, 6), {"size": (3, 2), "mode": "bilinear"},
     {"size": (3, 2), "scales": (0.5, 1 / 3), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((4, 5), {"size": (7, 9), "mode": "bilinear", "align_corners": True},
     {"size": (7, 9), "scales": (7 / 4, 9 / 5), "mode": "linear", "coordinate_transformation_mode": "align_corners"}),
]):
    case(str(i), "interpolate", [r(2, 3, *hw)], attrs, lambda x, kw=kwargs: F.interpolate(x, **kw))
case("f64", "cast", [r(2, 3)], {"dtype": "f64"}, lambda x: x.to(torch.float64))
