"""nnpack's fused convolution epilogues (bias + any claimed activation), its row-band
implicit GEMM, and its compiled max pooling, against the reference backend."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

nnpack = pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("numba")

from lowerkit_nnpack.conv import Conv2d, RunOptions  # noqa: E402
from lowerkit_nnpack.geometry import ConvGeometry  # noqa: E402
from lowerkit_nnpack.layers import MaxPool2d  # noqa: E402

ACTIVATIONS = [
    ("relu", {}), ("relu6", {}), ("clip", {"min": -0.5, "max": 0.75}), ("hardswish", {}),
    ("hardsigmoid", {"alpha": 0.2, "beta": 0.4}), ("silu", {}), ("gelu", {}), ("gelu", {"approximate": "tanh"}),
]


def _add(g, op, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def conv_act_module(x_shape, oc, k, stride, padding, act, *, groups=1, bias=True, seed=0):
    """conv2d (+ bias) followed by activation ``act`` = (op, attrs) or None."""
    rng = np.random.default_rng(seed)
    c = x_shape[1]
    g = Graph()
    x = g.add_input("x", TensorType("f32", x_shape))
    w_shape = (oc, c // groups, k, k)
    params = {"w": (rng.standard_normal(w_shape) / np.sqrt(c * k * k / groups)).astype(np.float32)}
    ins = [x, g.add_node("param", [], [TensorType("f32", w_shape)], {"name": "w"}).output]
    if bias:
        params["b"] = rng.standard_normal(oc).astype(np.float32)
        ins.append(g.add_node("param", [], [TensorType("f32", (oc,))], {"name": "b"}).output)
    y = _add(g, "conv2d", ins, {"stride": stride, "padding": padding, "groups": groups})
    if act is not None:
        y = _add(g, act[0], [y], act[1])
    g.set_outputs([y])
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    return Module(params, {"forward": GraphMethod(g)}, name="ConvAct")


def _close(got, want, tol):
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(got - want).max()) / scale < tol


# (x shape, out channels, kernel, stride, padding, algorithm, tolerance)
GEOMETRIES = [
    ((1, 3, 13, 11), 5, 3, (1, 1), (1, 1, 1, 1), "implicit_gemm", 1e-5),
    ((2, 4, 9, 10), 6, 3, (2, 2), (0, 1, 1, 0), "implicit_gemm", 1e-5),
    ((1, 5, 7, 9), 4, 1, (1, 1), (0, 0, 0, 0), "direct", 1e-5),
    ((3, 5, 9, 7), 4, 1, (2, 2), (0, 0, 0, 0), "direct", 1e-5),
    ((1, 3, 11, 13), 4, 3, (1, 1), (1, 1, 1, 1), "wt6x6", 1e-4),
    ((2, 3, 10, 9), 4, 3, (1, 1), (1, 0, 0, 1), "wt8x8", 1e-3),
    ((1, 2, 12, 11), 3, 5, (1, 1), (2, 2, 2, 2), "ft8x8", 1e-4),
]


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a[0] + "".join(f"-{v}" for v in a[1].values()))
@pytest.mark.parametrize("geom", range(len(GEOMETRIES)))
def test_conv_with_fused_activation_matches_reference(geom, act):
    x_shape, oc, k, stride, padding, algorithm, tol = GEOMETRIES[geom]
    module = conv_act_module(x_shape, oc, k, stride, padding, act, bias=geom % 2 == 0, seed=geom)
    x = (np.random.default_rng(geom).standard_normal(x_shape) * 3).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"algorithm": algorithm}})
    _close(lowered(x), module(x), tol)


@pytest.mark.parametrize("act", [("relu6", {}), ("silu", {}), ("hardswish", {})], ids=lambda a: a[0])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2)])
def test_depthwise_with_fused_activation_matches_reference(act, stride):
    for x_shape in ((1, 8, 7, 9), (2, 3, 37, 35)):  # channels-last kernel, row kernel
        module = conv_act_module(x_shape, x_shape[1], 3, stride, (1, 1, 1, 1), act, groups=x_shape[1])
        x = (np.random.default_rng(1).standard_normal(x_shape) * 3).astype(np.float32)
        _close(lk.to_backend(module, "nnpack")(x), module(x), 1e-5)


def test_the_plan_fuses_the_activation_into_the_convolution():
    module = conv_act_module((1, 3, 8, 8), 4, 3, (1, 1), (1, 1, 1, 1), ("relu6", {}))
    from lowerkit_nnpack.plan import Plan

    plan = Plan(module.methods["forward"].graph, module.parameters, dict(nnpack.DEFAULTS))
    assert [s.node.op for s in plan.steps] == ["conv2d"]


def test_unfused_activation_runs_alone():
    """An activation reading a graph input (nothing to fuse into) runs as its own pass."""
    g = Graph()
    x = g.add_input("x", TensorType("f32", (2, 3, 5, 5)))
    g.set_outputs([_add(g, "hardswish", [x])])
    g.nodes[0].debug_handle = 1
    module = Module({}, {"forward": GraphMethod(g)}, name="Act")
    xs = (np.random.default_rng(0).standard_normal((2, 3, 5, 5)) * 4).astype(np.float32)
    _close(lk.to_backend(module, "nnpack")(xs), module(xs), 1e-6)


def _im2col_conv(x, w, b, stride, padding):
    t, l, bt, r = padding
    xp = np.pad(x, ((0, 0), (0, 0), (t, bt), (l, r))).astype(np.float64)
    n, c, h, wd = xp.shape
    oc, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((n, oc, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + stride[0] * oh : stride[0], j : j + stride[1] * ow : stride[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out + b.reshape(1, -1, 1, 1)


@pytest.mark.parametrize(
    "x_shape,oc,k,stride,padding",
    [
        ((1, 3, 23, 21), 5, 3, (1, 1), (1, 1, 1, 1)),  # 483 output pixels: row bands
        ((1, 4, 45, 41), 6, 3, (2, 2), (1, 0, 0, 1)),  # strided, uneven padding
        ((1, 5, 21, 25), 3, 1, (1, 1), (0, 0, 0, 0)),  # direct, in place
        ((1, 5, 41, 43), 3, 1, (2, 2), (0, 0, 0, 0)),  # direct, strided
        ((1, 4, 9, 11), 5, 3, (1, 1), (1, 1, 1, 1)),  # under 400 pixels: serial im2col, channel blocks
    ],
)
@pytest.mark.parametrize("act", [None, (1, 0.0, 0.0), (2, 0.0, 6.0), (5, 0.0, 0.0)], ids=["none", "relu", "clip", "silu"])
def test_per_image_paths_match_a_direct_convolution(x_shape, oc, k, stride, padding, act):
    rng = np.random.default_rng(7)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((oc, c, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    geom = ConvGeometry(c, oc, x_shape[2:], (k, k), stride, padding)
    options = RunOptions(threads=2, min_parallel_flops=0)  # parallel even for tiny layers
    algorithm = "direct" if k == 1 else "implicit_gemm"
    conv = Conv2d(geom, w, b, algorithm=algorithm, options=options, activation=act)
    want = _im2col_conv(x, w, b, stride, padding)
    code = 0 if act is None else act[0]
    if code == 1:
        want = np.maximum(want, 0)
    elif code == 2:
        want = np.clip(want, act[1], act[2])
    elif code == 5:
        want = want / (1 + np.exp(-want))
    for _ in range(2):  # the second call reuses the workspace
        _close(conv(x), want, 1e-5)


@pytest.mark.parametrize(
    "x_shape,k,s,p",
    [
        ((1, 3, 112, 111), (3, 3), (2, 2), (1, 1, 1, 1)),  # parallel over planes
        ((2, 5, 9, 8), (2, 2), (2, 2), (0, 0, 0, 0)),
        ((3, 2, 11, 10), (3, 2), (1, 2), (0, 1, 2, 0)),
        ((1, 1, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0)),
    ],
)
def test_compiled_max_pool_matches_reference(x_shape, k, s, p):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    g = Graph()
    xi = g.add_input("x", TensorType("f32", x_shape))
    g.set_outputs([_add(g, "max_pool2d", [xi], {"kernel_size": k, "stride": s, "padding": p})])
    g.nodes[0].debug_handle = 1
    module = Module({}, {"forward": GraphMethod(g)}, name="Pool")
    pool = MaxPool2d(k, s, p, options=RunOptions(threads=2))
    np.testing.assert_array_equal(pool(x), module(x))
    np.testing.assert_array_equal(lk.to_backend(module, "nnpack")(x), module(x))


RESIDUAL_CASES = [
    # (x shape, out channels, kernel, stride, padding, algorithm, options, tolerance)
    ((1, 3, 23, 21), 5, 3, (1, 1), (1, 1, 1, 1), "implicit_gemm", RunOptions(2, min_parallel_flops=0), 1e-5),  # rows
    ((1, 4, 9, 11), 5, 3, (1, 1), (1, 1, 1, 1), "implicit_gemm", RunOptions(2, min_parallel_flops=0), 1e-5),  # channels
    ((3, 4, 9, 11), 5, 3, (2, 2), (1, 0, 0, 1), "implicit_gemm", RunOptions(2, min_parallel_flops=0), 1e-5),  # batched
    ((2, 5, 7, 9), 4, 1, (1, 1), (0, 0, 0, 0), "direct", RunOptions(1), 1e-5),
    ((1, 5, 7, 9), 6, 1, (1, 1), (0, 0, 0, 0), "direct", RunOptions(2, min_parallel_flops=0), 1e-5),
    ((1, 3, 11, 13), 4, 3, (1, 1), (1, 1, 1, 1), "wt6x6", RunOptions(2, min_parallel_flops=0), 1e-4),
    ((2, 3, 11, 13), 4, 3, (1, 1), (1, 1, 1, 1), "wt6x6", RunOptions(2, min_parallel_flops=0), 1e-4),
    ((2, 3, 10, 9), 4, 3, (1, 1), (1, 0, 0, 1), "wt8x8", RunOptions(1), 1e-3),
    ((1, 2, 12, 11), 3, 5, (1, 1), (2, 2, 2, 2), "ft8x8", RunOptions(1), 1e-4),
]


@pytest.mark.parametrize("act", [None, (1, 0.0, 0.0), (5, 0.0, 0.0)], ids=["none", "relu", "silu"])
@pytest.mark.parametrize("case", range(len(RESIDUAL_CASES)))
def test_fused_residual_add_matches_a_direct_convolution(case, act):
    x_shape, oc, k, stride, padding, algorithm, options, tol = RESIDUAL_CASES[case]
    rng = np.random.default_rng(case)
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal((oc, c, k, k)) / k).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    geom = ConvGeometry(c, oc, x_shape[2:], (k, k), stride, padding)
    conv = Conv2d(geom, w, b, algorithm=algorithm, options=options, activation=act)
    residual = rng.standard_normal(conv.output_shape(x_shape[0])).astype(np.float32)
    want = _im2col_conv(x, w, b, stride, padding) + residual
    if act is not None and act[0] == 1:
        want = np.maximum(want, 0)
    elif act is not None:
        want = want / (1 + np.exp(-want))
    for _ in range(2):
        _close(conv(x, residual=residual), want, tol)


RUN_INTO_CASES = [  # x shape, out channels, kernel, stride, padding, algorithm
    ((3, 6, 9, 7), 5, 1, (1, 1), (0, 0, 0, 0), "direct"),  # a batch of 1x1: one compiled call for all
    ((1, 6, 9, 7), 5, 1, (1, 1), (0, 0, 0, 0), "direct"),
    ((2, 3, 11, 10), 4, 3, (2, 2), (1, 1, 1, 1), "implicit_gemm"),
    ((2, 3, 11, 13), 4, 3, (1, 1), (1, 1, 1, 1), "wt6x6"),
]


@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("case", range(len(RUN_INTO_CASES)))
def test_run_into_matches_a_direct_convolution(case, with_residual):
    """A plan's bound call (``Conv2d.run_into``: on the calling thread, no checks) computes
    what the checked call and the oracle do: bias, the residual, then ReLU6."""
    x_shape, oc, k, stride, padding, algorithm = RUN_INTO_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal((oc, x_shape[1], k, k)) / k).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    geom = ConvGeometry(x_shape[1], oc, x_shape[2:], (k, k), stride, padding)
    conv = Conv2d(geom, w, b, algorithm=algorithm, options=RunOptions(1), activation=(2, 0.0, 6.0))
    residual = rng.standard_normal(conv.output_shape(x_shape[0])).astype(np.float32) if with_residual else None
    want = np.clip(_im2col_conv(x, w, b, stride, padding) + (0 if residual is None else residual), 0, 6)
    out = np.full(conv.output_shape(x_shape[0]), np.nan, np.float32)
    for _ in range(2):
        assert conv.run_into(x, out, residual) is out
        _close(out, want, 1e-4)
    _close(conv(x, residual=residual), out, 1e-6)


def test_run_into_of_a_threaded_layer_or_an_odd_input_takes_the_checked_call(monkeypatch):
    """``run_into`` keeps to the calling thread: a layer large enough for its pool workers,
    or an input that is not C-contiguous float32, goes through ``__call__`` (same result)."""
    rng = np.random.default_rng(3)
    geom = ConvGeometry(4, 6, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1))
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    calls = []
    real = Conv2d.__call__
    monkeypatch.setattr(Conv2d, "__call__", lambda self, *a, **kw: (calls.append(1), real(self, *a, **kw))[1])
    want = _im2col_conv(x, w, np.zeros(6, np.float32), (1, 1), (1, 1, 1, 1))
    threaded = Conv2d(geom, w, algorithm="implicit_gemm", options=RunOptions(2, min_parallel_flops=0))
    serial = Conv2d(geom, w, algorithm="implicit_gemm", options=RunOptions(1))
    out = np.empty((2, 6, 9, 9), np.float32)
    _close(threaded.run_into(x, out), want, 1e-4)
    assert len(calls) == 1
    _close(serial.run_into(np.asfortranarray(x), out), want, 1e-4)
    _close(serial.run_into(x.astype(np.float64), out), want, 1e-4)
    assert len(calls) == 3
    _close(serial.run_into(x, out), want, 1e-4)
    assert len(calls) == 3


@pytest.mark.parametrize("x_shape", [(1, 8, 7, 9), (2, 3, 37, 35)])
def test_depthwise_with_residual_matches_reference(x_shape):
    """depthwise conv + residual + relu6 lowered to nnpack (the add fuses into the conv)."""
    c = x_shape[1]
    g = Graph()
    rng = np.random.default_rng(0)
    x = g.add_input("x", TensorType("f32", x_shape))
    params = {"w": rng.standard_normal((c, 1, 3, 3)).astype(np.float32)}
    w = g.add_node("param", [], [TensorType("f32", (c, 1, 3, 3))], {"name": "w"}).output
    y = _add(g, "conv2d", [x, w], {"padding": (1, 1, 1, 1), "groups": c})
    y = _add(g, "relu6", [_add(g, "add", [y, x])])
    g.set_outputs([y])
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    module = Module(params, {"forward": GraphMethod(g)}, name="DwResidual")
    xs = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    _close(lk.to_backend(module, "nnpack")(xs), module(xs), 1e-5)


def test_residual_of_the_wrong_shape_is_refused():
    from lowerkit_nnpack.geometry import GeometryError

    geom = ConvGeometry(2, 3, (5, 5), (1, 1))
    conv = Conv2d(geom, np.ones((3, 2, 1, 1), np.float32))
    with pytest.raises(GeometryError, match=r"residual must have the output's shape \[1, 3, 5, 5\]"):
        conv(np.ones((1, 2, 5, 5), np.float32), residual=np.ones((1, 3, 5, 4), np.float32))
