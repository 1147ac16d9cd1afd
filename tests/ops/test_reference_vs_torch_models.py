"""The ops mobile CNNs and transformers need: reference kernels against PyTorch over sweeps.

Same shape as ``test_reference_vs_torch.py``: attributes go through the op's schema, the
inferred type is checked against the kernel's result, and the values against torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lowerkit.ir.types import TensorType
from lowerkit.opset import get_schema

torch = pytest.importorskip("torch")
F = torch.nn.functional
KERNELS = pytest.importorskip("lowerkit_reference").KERNELS

RTOL, ATOL = 1e-4, 1e-5


def run_op(op: str, args: list[np.ndarray], **attrs):
    schema = get_schema(op)
    normalized = schema.normalize_attrs(attrs)
    expected = schema.infer([TensorType.of(a) for a in args], normalized)
    out = KERNELS[op](args, normalized)
    outs = out if isinstance(out, list) else [out]
    assert [TensorType.of(o) for o in outs] == expected
    return out


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(ours, theirs, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def rand(rng, *shape):
    return (rng.standard_normal(shape) * 3).astype(np.float32)


# -- activations --------------------------------------------------------------------------
ACTIVATIONS = {
    "hardsigmoid": (F.hardsigmoid, {}),
    "hardswish": (F.hardswish, {}),
    "silu": (F.silu, {}),
    "gelu": (F.gelu, {}),
    "gelu-tanh": (lambda x: F.gelu(x, approximate="tanh"), {"approximate": "tanh"}),
    "erf": (torch.erf, {}),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(7,), (2, 3, 5), (1, 4, 3, 3)])
def test_activation(rng, name, shape):
    fn, attrs = ACTIVATIONS[name]
    x = rand(rng, *shape)
    x.flat[:3] = [-3.0, 3.0, 0.0]  # the kinks of the hard activations
    close(run_op(name.split("-")[0], [x], **attrs), fn(t(x)))


def test_hardsigmoid_onnx_alpha_beta(rng):
    x = rand(rng, 3, 4)
    expected = np.clip(0.2 * x + 0.4, 0, 1)
    np.testing.assert_allclose(run_op("hardsigmoid", [x], alpha=0.2, beta=0.4), expected, rtol=1e-6)


def test_pow_and_where(rng):
    a, b = np.abs(rand(rng, 2, 3, 4)) + 0.1, rand(rng, 3, 1)
    close(run_op("pow", [a, b]), torch.pow(t(a), t(b)))
    cond = rng.random((3, 1)) > 0.5
    x, y = rand(rng, 2, 1, 4), rand(rng, 4)
    close(run_op("where", [cond, x, y]), torch.where(t(cond), t(x), t(y)))


@pytest.mark.parametrize("dtype", ["f16", "f64", "i64", "i32", "u8", "bool"])
def test_cast(rng, dtype):
    from lowerkit.ir import DTYPES

    x = rand(rng, 3, 4) * 10
    x.flat[:2] = [-0.0, 0.0]
    torch_dtype = {"f16": torch.float16, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32,
                   "u8": torch.uint8, "bool": torch.bool}[dtype]
    if dtype == "u8":
        x = np.abs(x)  # negative floats to uint8 are undefined in both
    ours = run_op("cast", [x], dtype=dtype)
    assert ours.dtype == DTYPES[dtype]
    np.testing.assert_array_equal(ours, t(x).to(torch_dtype).numpy())


# -- reductions -----------------------------------------------------------------------------
REDUCTIONS = {
    "reduce_mean": lambda x, d, k: torch.mean(x, dim=d, keepdim=k),
    "reduce_sum": lambda x, d, k: torch.sum(x, dim=d, keepdim=k),
    "reduce_max": lambda x, d, k: torch.amax(x, dim=d, keepdim=k),
    "reduce_min": lambda x, d, k: torch.amin(x, dim=d, keepdim=k),
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("dims", [(), (0,), (-1,), (1, 2), (-1, 0), (0, 1, 2, 3)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction(rng, op, dims, keepdim):
    x = rand(rng, 2, 3, 4, 5)
    expected = REDUCTIONS[op](t(x), list(dims) if dims else list(range(4)), keepdim)
    close(run_op(op, [x], dims=dims, keepdim=keepdim), expected)


# -- normalisation ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape,normalized", [((2, 5, 8), (8,)), ((2, 3, 4, 4), (3, 4, 4)), ((6,), (6,)),
                                             ((1, 7, 4, 6), (6,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm(rng, shape, normalized, affine):
    x = rand(rng, *shape) + 2.0
    w, b = rand(rng, *normalized), rand(rng, *normalized)
    args = [x] + ([w] if affine != "none" else []) + ([b] if affine == "both" else [])
    ours = run_op("layer_norm", args, axis=len(shape) - len(normalized), eps=1e-5)
    theirs = F.layer_norm(t(x), normalized, t(w) if affine != "none" else None, t(b) if affine == "both" else None)
    close(ours, theirs)


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 4), 3), ((1, 4, 5), 4), ((2, 8, 3, 3), 1), ((1, 6, 2, 2, 2), 2)])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(rng, shape, groups, affine):
    x = rand(rng, *shape)
    w, b = rand(rng, shape[1]), rand(rng, shape[1])
    args = [x, w, b] if affine else [x]
    ours = run_op("group_norm", args, num_groups=groups, eps=1e-5)
    close(ours, F.group_norm(t(x), groups, t(w) if affine else None, t(b) if affine else None))


# -- indexing ---------------------------------------------------------------------------------
SLICES = [
    ((0,), (3,), (0,), (1,)),
    ((1, -3), (2**62, -1), (1, 3), (1, 2)),
    ((-1,), (-(2**62),), (2,), (-1,)),
    ((4, 0), (0, 5), (3, 1), (-2, 3)),
    ((-100,), (100,), (-1,), (3,)),
    ((5,), (1,), (0,), (1,)),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice(rng, starts, ends, axes, steps):
    x = rand(rng, 6, 5, 4, 7)
    index = [slice(None)] * 4
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    ours = run_op("slice", [x], starts=starts, ends=ends, axes=axes, steps=steps)
    np.testing.assert_array_equal(ours, x[tuple(index)])
    if all(st > 0 for st in steps):  # torch slicing takes positive steps only
        np.testing.assert_array_equal(ours, t(x)[tuple(index)].numpy())


@pytest.mark.parametrize("dim,sizes", [(0, (2, 4)), (1, (1, 1, 3)), (-1, (6,)), (2, (0, 6))])
def test_split(rng, dim, sizes):
    x = rand(rng, 6, 5, 6)
    ours = run_op("split", [x], dim=dim, sizes=sizes)
    theirs = torch.split(t(x), list(sizes), dim=dim)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.parametrize("dim,indices", [(0, np.array([2, 0, 2])), (1, np.array(0)), (-1, np.array([[1, -1], [0, 3]])),
                                         (2, np.array([], dtype=np.int64))])
def test_gather(rng, dim, indices):
    x = rand(rng, 3, 4, 5)
    ours = run_op("gather", [x], dim=dim, indices=indices.astype(np.int64))
    if indices.ndim == 1:
        close(ours, torch.index_select(t(x), dim, t(indices.astype(np.int64) % x.shape[dim])))
    elif indices.ndim == 0:
        close(ours, torch.select(t(x), dim, int(indices)))
    np.testing.assert_array_equal(ours, np.take(x, indices, axis=dim))


def _torch_pads(pads):
    """lowerkit's ONNX-order pads -> F.pad's last-dim-first (begin, end) pairs."""
    rank = len(pads) // 2
    out = []
    for d in reversed(range(rank)):
        out += [pads[d], pads[d + rank]]
    while len(out) > 4 and out[-2:] == [0, 0]:  # torch pads at most the last dims for reflect/replicate
        out = out[:-2]
    return out


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
@pytest.mark.parametrize("pads", [(0, 0, 1, 2, 0, 0, 3, 0), (0, 0, 0, 0, 0, 0, 0, 0), (0, 0, 2, 2, 0, 0, 2, 2),
                                  (0, 0, 0, 1, 0, 0, 0, 3)])
def test_pad(rng, mode, pads):
    x = rand(rng, 2, 3, 4, 5)
    ours = run_op("pad", [x], pads=pads, mode=mode, value=1.5)
    theirs = F.pad(t(x), _torch_pads(pads), mode=mode, **({"value": 1.5} if mode == "constant" else {}))
    close(ours, theirs)


def test_pad_constant_any_rank(rng):
    x = rand(rng, 3, 4)
    close(run_op("pad", [x], pads=(1, 0, 2, 3)), F.pad(t(x), [0, 3, 1, 2]))


@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 3), (2, 4, 3)), ((4,), (1, 4))])
def test_expand(rng, shape, target):
    x = rand(rng, *shape)
    close(run_op("expand", [x], shape=target), t(x).expand(*target))


# -- matmul and softmax on any axis ------------------------------------------------------------
@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (5, 6)), ((3, 1, 4, 5), (2, 5, 3)), ((4,), (2, 4, 3)),
                                 ((2, 1, 3, 4), (1, 5, 4, 2))])
def test_batched_matmul(rng, a, b):
    x, y = rand(rng, *a), rand(rng, *b)
    close(run_op("matmul", [x, y]), torch.matmul(t(x), t(y)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_softmax_any_axis(rng, op, dim):
    x = rand(rng, 3, 4, 5)
    close(run_op(op, [x], dim=dim), getattr(F, op)(t(x), dim=dim))


# -- interpolate ------------------------------------------------------------------------------
INTERPOLATIONS = [
    # (input HxW, torch kwargs, lowerkit attrs)
    ((4, 5), {"scale_factor": 2, "mode": "nearest"}, {"size": (8, 10), "scales": (2.0, 2.0)}),
    ((5, 7), {"size": (3, 4), "mode": "nearest"}, {"size": (3, 4), "scales": (3 / 5, 4 / 7)}),
    ((6, 5), {"size": (14, 10), "mode": "nearest"}, {"size": (14, 10), "scales": (14 / 6, 2.0)}),
    ((4, 5), {"scale_factor": 2, "mode": "bilinear"},
     {"size": (8, 10), "scales": (2.0, 2.0), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((5, 3), {"size": (7, 8), "mode": "bilinear"},
     {"size": (7, 8), "scales": (7 / 5, 8 / 3), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((6, 6), {"size": (3, 2), "mode": "bilinear"},
     {"size": (3, 2), "scales": (0.5, 1 / 3), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((4, 5), {"size": (7, 9), "mode": "bilinear", "align_corners": True},
     {"size": (7, 9), "scales": (7 / 4, 9 / 5), "mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ((5, 4), {"size": (1, 3), "mode": "bilinear", "align_corners": True},
     {"size": (1, 3), "scales": (1 / 5, 3 / 4), "mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ((3, 4), {"scale_factor": 1.5, "mode": "bilinear"},
     {"size": (4, 6), "scales": (1.5, 1.5), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ((3, 4), {"scale_factor": 1.7, "mode": "nearest"}, {"size": (5, 6), "scales": (1.7, 1.7)}),
]


@pytest.mark.parametrize("hw,kwargs,attrs", INTERPOLATIONS)
def test_interpolate(rng, hw, kwargs, attrs):
    x = rand(rng, 2, 3, *hw)
    close(run_op("interpolate", [x], **attrs), F.interpolate(t(x), **kwargs))


def test_interpolate_1d_linear(rng):
    x = rand(rng, 1, 2, 5)
    ours = run_op("interpolate", [x], size=(9,), scales=(9 / 5,), mode="linear",
                  coordinate_transformation_mode="half_pixel")
    close(ours, F.interpolate(t(x), size=9, mode="linear"))


# -- attention --------------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [None, "bool", "float", "causal"])
@pytest.mark.parametrize("shapes", [((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)), ((4, 8), (4, 8), (4, 8)),
                                    ((2, 1, 4, 8), (1, 3, 4, 8), (2, 3, 4, 5))])
def test_scaled_dot_product_attention(rng, mask, shapes):
    q, k, v = (rand(rng, *s) * 0.3 for s in shapes)
    length, source = q.shape[-2], k.shape[-2]
    kwargs: dict = {}
    attrs: dict = {"scale": 1 / math.sqrt(q.shape[-1])}
    args = [q, k, v]
    if mask == "bool":
        m = rng.random((length, source)) > 0.3
        m[:, 0] = True  # no fully masked row
        args.append(m)
        kwargs["attn_mask"] = t(m)
    elif mask == "float":
        m = rand(rng, length, source)
        args.append(m)
        kwargs["attn_mask"] = t(m)
    elif mask == "causal":
        attrs["is_causal"] = kwargs["is_causal"] = True
    ours = run_op("scaled_dot_product_attention", args, **attrs)
    close(ours, F.scaled_dot_product_attention(t(q), t(k), t(v), **kwargs))


def test_scaled_dot_product_attention_custom_scale(rng):
    q, k, v = rand(rng, 1, 3, 4), rand(rng, 1, 5, 4), rand(rng, 1, 5, 2)
    ours = run_op("scaled_dot_product_attention", [q, k, v], scale=0.05)
    close(ours, F.scaled_dot_product_attention(t(q), t(k), t(v), scale=0.05))


# -- transposed convolution --------------------------------------------------------------------
CONV_T = [
    # (in channels, out channels, kernel, stride, padding (h, w), output_padding, dilation, groups, hw)
    (3, 4, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1, (5, 5)),
    (4, 2, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, (4, 5)),
    (4, 6, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 2, (3, 3)),
    (2, 2, (3, 2), (2, 3), (1, 0), (0, 2), (1, 1), 1, (4, 3)),
    (3, 3, (3, 3), (1, 1), (2, 2), (0, 0), (2, 2), 3, (5, 6)),
    (2, 4, (4, 4), (3, 3), (1, 2), (2, 1), (1, 1), 2, (2, 3)),
]


@pytest.mark.parametrize("case", CONV_T)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose2d(rng, case, bias):
    ic, oc, k, stride, padding, out_pad, dilation, groups, hw = case
    x = rand(rng, 2, ic, *hw)
    w = rand(rng, ic, oc // groups, *k)
    b = rand(rng, oc)
    ours = run_op("conv_transpose2d", [x, w, b] if bias else [x, w], stride=stride,
                  padding=(padding[0], padding[1], padding[0], padding[1]), output_padding=out_pad,
                  dilation=dilation, groups=groups)
    theirs = F.conv_transpose2d(t(x), t(w), t(b) if bias else None, stride, padding, out_pad, groups, dilation)
    close(ours, theirs, atol=1e-4)


# -- property sweeps ------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_index = st.integers(-9, 9) | st.sampled_from([2**62, -(2**62)])


@settings(max_examples=60, deadline=None)
@given(start=_index, end=_index, step=st.integers(-3, 3).filter(bool), axis=st.integers(-3, 2))
def test_slice_is_python_slicing(start, end, step, axis):
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    index = [slice(None)] * 3
    index[axis] = slice(start, end, step)
    ours = run_op("slice", [x], starts=(start,), ends=(end,), axes=(axis,), steps=(step,))
    np.testing.assert_array_equal(ours, x[tuple(index)])


@settings(max_examples=40, deadline=None)
@given(pads=st.lists(st.integers(0, 3), min_size=4, max_size=4), mode=st.sampled_from(["constant", "reflect", "replicate"]))
def test_pad_matches_torch(pads, mode):
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 5)).astype(np.float32)
    top, left, bottom, right = pads
    ours = run_op("pad", [x], pads=(0, 0, top, left, 0, 0, bottom, right), mode=mode)
    close(ours, F.pad(t(x), (left, right, top, bottom), mode=mode))
