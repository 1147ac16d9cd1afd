"""Every reference kernel agrees with PyTorch over a sweep of shapes and attributes.

Each case builds the attributes through the op's schema (so defaults are the registry's),
checks the schema's inferred type against the kernel's result, and compares with torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lowerkit.ir.types import TensorType
from lowerkit.opset import STRUCTURAL_OPS, all_schemas, get_schema

torch = pytest.importorskip("torch")
F = torch.nn.functional
KERNELS = pytest.importorskip("lowerkit_reference").KERNELS

RTOL, ATOL = 1e-4, 1e-5


def run_op(op: str, args: list[np.ndarray], **attrs) -> np.ndarray:
    """Run the reference kernel and check its result against the schema's type inference."""
    schema = get_schema(op)
    normalized = schema.normalize_attrs(attrs)
    (expected,) = schema.infer([TensorType.of(a) for a in args], normalized)
    out = KERNELS[op](args, normalized)
    assert TensorType.of(out) == expected
    return out


def t(a: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(ours: np.ndarray, theirs) -> None:
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=RTOL, atol=ATOL)


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def tpad(x, padding):
    top, left, bottom, right = padding
    return F.pad(x, (left, right, top, bottom))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_every_registry_op_has_a_kernel():
    ops = {s.name for s in all_schemas()} - STRUCTURAL_OPS
    assert ops == set(KERNELS)


# -- element-wise -----------------------------------------------------------------------

BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 5), (4, 1)), ((1,), (3, 2))])
def test_binary(rng, op, shapes):
    a, b = rand(rng, *shapes[0]), rand(rng, *shapes[1])
    close(run_op(op, [a, b]), BINARY[op](t(a), t(b)))


UNARY = {
    "neg": (torch.neg, {}),
    "relu": (F.relu, {}),
    "relu6": (F.relu6, {}),
    "sigmoid": (torch.sigmoid, {}),
    "tanh": (torch.tanh, {}),
    "exp": (torch.exp, {}),
    "log": (torch.log, {}),
    "sqrt": (torch.sqrt, {}),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary(rng, op, dtype):
    x = rand(rng, 2, 3, 5, dtype=dtype) * 4
    if op in ("log", "sqrt"):
        x = np.abs(x) + dtype(0.1)
    x[0, 0, :3] = [0, 6, 7] if op in ("relu6", "relu") else x[0, 0, :3]
    fn, kw = UNARY[op]
    close(run_op(op, [x]), fn(t(x), **kw))


def test_sigmoid_extremes_do_not_overflow():
    x = np.array([-1000, -20, 0, 20, 1000], np.float32)
    with np.errstate(over="raise", invalid="raise"):
        out = run_op("sigmoid", [x])
    close(out, torch.sigmoid(t(x)))


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (0.0, float("inf")), (float("-inf"), 1.0)])
def test_clip(rng, lo, hi):
    x = rand(rng, 4, 6)
    close(run_op("clip", [x], min=lo, max=hi), torch.clamp(t(x), min=lo, max=hi))


@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_leaky_relu(rng, slope):
    x = rand(rng, 3, 7)
    attrs = {} if slope == 0.01 else {"negative_slope": slope}
    close(run_op("leaky_relu", [x], **attrs), F.leaky_relu(t(x), slope))


# -- linear -----------------------------------------------------------------------------


@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))])
def test_matmul(rng, sa, sb):
    a, b = rand(rng, *sa), rand(rng, *sb)
    ours = run_op("matmul", [a, b])
    assert isinstance(ours, np.ndarray)
    close(ours, torch.matmul(t(a), t(b)))


@pytest.mark.parametrize("x_shape", [(3, 6), (2, 3, 6), (6,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(rng, x_shape, bias):
    x, w, b = rand(rng, *x_shape), rand(rng, 5, 6), rand(rng, 5)
    args = [x, w, b] if bias else [x, w]
    close(run_op("linear", args), F.linear(t(x), t(w), t(b) if bias else None))


# -- convolution ------------------------------------------------------------------------

# (N, C, H, W, OC, KH, KW, stride, padding [t, l, b, r], dilation, groups)
CONV_CASES = [
    (1, 3, 7, 9, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (3, 4, 9, 8, 6, 3, 2, (2, 2), (0, 0, 0, 0), (1, 1), 2),
    (2, 6, 11, 10, 6, 3, 3, (2, 1), (1, 2, 0, 1), (2, 2), 6),  # depthwise, dilated, asymmetric
    (1, 4, 8, 8, 8, 5, 5, (1, 2), (2, 1, 3, 0), (1, 2), 4),
    (3, 2, 5, 5, 3, 1, 1, (2, 2), (0, 0, 1, 1), (1, 1), 1),
    (2, 8, 12, 12, 16, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 8),  # depthwise multiplier 2
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(rng, case, bias):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    x, wt, b = rand(rng, n, c, h, w), rand(rng, oc, c // groups, kh, kw), rand(rng, oc)
    args = [x, wt, b] if bias else [x, wt]
    ours = run_op("conv2d", args, stride=stride, padding=padding, dilation=dilation, groups=groups)
    theirs = F.conv2d(tpad(t(x), padding), t(wt), t(b) if bias else None, stride, 0, dilation, groups)
    close(ours, theirs)


def test_conv2d_f64(rng):
    x, wt = rand(rng, 1, 2, 6, 6, dtype=np.float64), rand(rng, 3, 2, 3, 3, dtype=np.float64)
    ours = run_op("conv2d", [x, wt], padding=(1, 1, 1, 1))
    assert ours.dtype == np.float64
    close(ours, F.conv2d(t(x), t(wt), None, 1, 1))


# Input sizes include one with a row and a column no window reaches (output_padding case).
@pytest.mark.parametrize("case", CONV_CASES + [(2, 4, 10, 9, 4, 3, 3, (2, 2), (1, 1, 0, 0), (1, 1), 1)])
def test_conv2d_input_grad(rng, case):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    wt = rand(rng, oc, c // groups, kh, kw)
    x_type = TensorType("f32", (n, c, h, w))
    conv_attrs = get_schema("conv2d").normalize_attrs(
        {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    )
    (out_type,) = get_schema("conv2d").infer([x_type, TensorType.of(wt)], conv_attrs)
    go = rand(rng, *out_type.shape)
    ours = run_op(
        "conv2d_input_grad", [wt, go], input_size=(n, c, h, w),
        stride=stride, padding=padding, dilation=dilation, groups=groups,
    )
    top, left, bottom, right = padding
    padded_size = (n, c, h + top + bottom, w + left + right)
    theirs = torch.nn.grad.conv2d_input(padded_size, t(wt), t(go), stride, 0, dilation, groups)
    close(ours, theirs[:, :, top : top + h, left : left + w])


@pytest.mark.parametrize("case", CONV_CASES + [(2, 4, 10, 9, 4, 3, 3, (2, 2), (1, 1, 0, 0), (1, 1), 1)])
def test_conv2d_weight_grad(rng, case):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    x = rand(rng, n, c, h, w)
    w_size = (oc, c // groups, kh, kw)
    conv_attrs = get_schema("conv2d").normalize_attrs(
        {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    )
    (out_type,) = get_schema("conv2d").infer([TensorType.of(x), TensorType("f32", w_size)], conv_attrs)
    go = rand(rng, *out_type.shape)
    ours = run_op(
        "conv2d_weight_grad", [x, go], weight_size=w_size,
        stride=stride, padding=padding, dilation=dilation, groups=groups,
    )
    theirs = torch.nn.grad.conv2d_weight(tpad(t(x), padding), w_size, t(go), stride, 0, dilation, groups)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=RTOL, atol=1e-4)  # sums over N*OH*OW terms


# -- pooling ----------------------------------------------------------------------------

# (N, C, H, W, kernel, stride, symmetric padding, dilation)
POOL_CASES = [
    (1, 2, 7, 7, (2, 2), (2, 2), (0, 0), (1, 1)),
    (3, 3, 9, 8, (3, 3), (2, 2), (1, 1), (1, 1)),
    (2, 2, 10, 11, (3, 2), (2, 1), (1, 0), (1, 1)),
    (1, 4, 8, 9, (3, 3), (3, 3), (1, 1), (1, 1)),
    (2, 1, 12, 13, (3, 2), (2, 3), (1, 1), (2, 2)),  # dilated (max only)
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool2d(rng, case, ceil_mode):
    n, c, h, w, k, s, p, d = case
    x = rand(rng, n, c, h, w)
    ours = run_op("max_pool2d", [x], kernel_size=k, stride=s, padding=(p[0], p[1], p[0], p[1]),
                  dilation=d, ceil_mode=ceil_mode)
    close(ours, F.max_pool2d(t(x), k, s, p, d, ceil_mode))


@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[-1] == (1, 1)])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(rng, case, ceil_mode, count_include_pad):
    n, c, h, w, k, s, p, _ = case
    x = rand(rng, n, c, h, w)
    ours = run_op("avg_pool2d", [x], kernel_size=k, stride=s, padding=(p[0], p[1], p[0], p[1]),
                  ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    close(ours, F.avg_pool2d(t(x), k, s, p, ceil_mode, count_include_pad))


def test_max_pool2d_asymmetric_padding(rng):
    # -inf padding makes explicit asymmetric padding equal to padding the input first.
    x = rand(rng, 2, 3, 8, 7)
    ours = run_op("max_pool2d", [x], kernel_size=(3, 3), stride=(2, 2), padding=(0, 1, 2, 1))
    theirs = F.max_pool2d(F.pad(t(x), (1, 1, 0, 2), value=float("-inf")), 3, 2)
    close(ours, theirs)


def test_avg_pool2d_asymmetric_padding(rng):
    x = rand(rng, 1, 2, 7, 6)
    padding = (1, 0, 2, 1)
    included = run_op("avg_pool2d", [x], kernel_size=(3, 2), stride=(2, 2), padding=padding)
    close(included, F.avg_pool2d(tpad(t(x), padding), (3, 2), 2))
    excluded = run_op("avg_pool2d", [x], kernel_size=(3, 2), stride=(2, 2), padding=padding,
                      count_include_pad=False)
    ones = tpad(torch.ones(1, 1, 7, 6), padding)
    close(excluded, F.avg_pool2d(tpad(t(x), padding), (3, 2), 2) / F.avg_pool2d(ones, (3, 2), 2))


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (3, 2, 1, 1)])
def test_global_avg_pool2d(rng, shape):
    x = rand(rng, *shape)
    close(run_op("global_avg_pool2d", [x]), F.adaptive_avg_pool2d(t(x), 1))


# -- normalisation and softmax ----------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 4, 5, 5), (2, 4), (1, 4, 6)])
def test_batch_norm(rng, shape):
    x = rand(rng, *shape)
    mean, weight, bias = rand(rng, 4), rand(rng, 4), rand(rng, 4)
    var = np.abs(rand(rng, 4)) + np.float32(0.1)
    ours = run_op("batch_norm", [x, mean, var, weight, bias], eps=1e-3)
    theirs = F.batch_norm(t(x), t(mean), t(var), t(weight), t(bias), training=False, eps=1e-3)
    close(ours, theirs)


@pytest.mark.parametrize("op, fn", [("softmax", F.softmax), ("log_softmax", F.log_softmax)])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax(rng, op, fn, dim):
    x = rand(rng, 3, 5, 4) * 10
    x[0, 0, 0] = 80  # exp would overflow in f32 without the max shift
    close(run_op(op, [x], dim=dim), fn(t(x), dim=dim))


# -- shape ops --------------------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(1, -1), (0, -1), (1, 2), (-2, -1)])
def test_flatten(rng, start, end):
    x = rand(rng, 2, 3, 4, 5)
    close(run_op("flatten", [x], start_dim=start, end_dim=end), torch.flatten(t(x), start, end))


@pytest.mark.parametrize("shape", [(6, 10), (-1, 5), (3, -1, 2)])
def test_reshape(rng, shape):
    x = rand(rng, 2, 3, 10)
    close(run_op("reshape", [x], shape=shape), torch.reshape(t(x), shape))


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 0, 1)])
def test_transpose(rng, perm):
    x = rand(rng, 2, 3, 4)
    close(run_op("transpose", [x], perm=perm), t(x).permute(*perm))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concat(rng, dim):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for s, extra in zip(shapes, (1, 2, 3)):
        s[dim] = extra
    xs = [rand(rng, *s) for s in shapes]
    close(run_op("concat", xs, dim=dim), torch.cat([t(x) for x in xs], dim=dim))


# -- property tests: random geometry, schema vs kernel vs torch ---------------------------

@st.composite
def conv_geometry(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    c, oc = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - padding[0] - padding[2]), 9))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - padding[1] - padding[3]), 9))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return (draw(st.integers(1, 2)), c, h, w, oc, kh, kw, stride, padding, (dh, dw), groups)


@settings(max_examples=40, deadline=None)
@given(case=conv_geometry())
def test_conv2d_any_geometry(case):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    rng = np.random.default_rng(0)
    x, wt = rand(rng, n, c, h, w), rand(rng, oc, c // groups, kh, kw)
    ours = run_op("conv2d", [x, wt], stride=stride, padding=padding, dilation=dilation, groups=groups)
    close(ours, F.conv2d(tpad(t(x), padding), t(wt), None, stride, 0, dilation, groups))


@st.composite
def pool_geometry(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    p = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))  # torch's limit
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    h, w = draw(st.integers(k[0], 10)), draw(st.integers(k[1], 10))
    return (draw(st.integers(1, 2)), h, w, k, s, p, draw(st.booleans()), draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(case=pool_geometry())
def test_pools_any_geometry(case):
    n, h, w, k, s, p, ceil_mode, include_pad = case
    x = rand(np.random.default_rng(0), n, 2, h, w)
    padding = (p[0], p[1], p[0], p[1])
    close(run_op("max_pool2d", [x], kernel_size=k, stride=s, padding=padding, ceil_mode=ceil_mode),
          F.max_pool2d(t(x), k, s, p, 1, ceil_mode))
    close(run_op("avg_pool2d", [x], kernel_size=k, stride=s, padding=padding, ceil_mode=ceil_mode,
                 count_include_pad=include_pad),
          F.avg_pool2d(t(x), k, s, p, ceil_mode, include_pad))
