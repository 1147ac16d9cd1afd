"""Derivative entries of the shape, indexing and reduction ops: data movement backwards."""

from __future__ import annotations

import numpy as np

from ..opset.reduce import reduced_dims
from .table import derivative


def _inverse(perm) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def _concat(d):
    dim = d.attrs["dim"]
    sizes = tuple(v.type.shape[dim] for v in d.inputs)
    parts = d.emit("split", d.grad, dim=dim, sizes=sizes)
    return parts if isinstance(parts, tuple) else (parts,)


def _split(d):
    return d.emit("concat", *(d.grad_of(i) for i in range(len(d.outs))), dim=d.attrs["dim"])


def _keepdim_grad(d):
    """The gradient of a reduction, reshaped to keep the reduced dims (size 1)."""
    x = d.x
    dims = reduced_dims(d.node.op, d.attrs["dims"], x.type.rank)
    kept = tuple(1 if i in dims else n for i, n in enumerate(x.type.shape))
    return d.reshape(d.grad, kept), dims


def _reduce_sum(d):
    g, _ = _keepdim_grad(d)
    return d.expand(g, d.x.type.shape)


def _reduce_mean(d):
    g, dims = _keepdim_grad(d)
    count = int(np.prod([d.x.type.shape[i] for i in dims]))
    return d.expand(d.scale(g, 1.0 / count), d.x.type.shape)


def _extreme(d):
    return d.emit("reduce_extreme_grad", d.x, d.out, d.grad, dims=d.attrs["dims"], keepdim=d.attrs["keepdim"])


def _pad(d):
    return d.emit("pad_grad", d.grad, input_size=d.x.type.shape, pads=d.attrs["pads"], mode=d.attrs["mode"])


derivative("flatten", x=lambda d: d.reshape(d.grad, d.x.type.shape), doc="reshape back")
derivative("reshape", x=lambda d: d.reshape(d.grad, d.x.type.shape), doc="reshape back")
derivative("transpose", x=lambda d: d.transpose(d.grad, _inverse(d.attrs["perm"])),
           doc="transpose by the inverse perm")
derivative("expand", x=lambda d: d.sum_to(d.grad, d.x), doc="sum_to_shape")
derivative("sum_to_shape", x=lambda d: d.expand(d.grad, d.x.type.shape), doc="expand back")
derivative("concat", xs=_concat, doc="split of g")
derivative("split", x=_split, doc="concat of the outputs' grads (zeros for unused outputs)")
derivative("slice", x=lambda d: d.emit("slice_grad", d.grad, input_size=d.x.type.shape, **d.attrs),
           doc="slice_grad")
derivative("pad", x=_pad, doc="pad_grad")
derivative("gather", x=lambda d: d.emit("gather_grad", d.grad, input_size=d.x.type.shape, **d.attrs),
           doc="gather_grad (scatter-add)")
derivative("reduce_sum", x=_reduce_sum, doc="g expanded")
derivative("reduce_mean", x=_reduce_mean, doc="g / count, expanded")
derivative("reduce_max", x=_extreme, doc="reduce_extreme_grad (ties share g)")
derivative("reduce_min", x=_extreme, doc="reduce_extreme_grad (ties share g)")
