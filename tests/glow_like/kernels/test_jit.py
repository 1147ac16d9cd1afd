"""glow_like's compiled (numba) kernels against the reference backend: grouped and
depthwise convolution, Winograd, pooling, element-wise chains and normalisation over shape
sweeps; 8 threads on one handle; steady-state calls allocate only their outputs."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tests.team_calls import from_threads

from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

glow = pytest.importorskip("lowerkit_glow_like")
pytest.importorskip("numba")


def _f32(shape) -> TensorType:
    return TensorType("f32", tuple(shape))


def _module(graph: Graph, params: dict) -> Module:
    for i, node in enumerate(graph.nodes):
        node.debug_handle = i + 1
        node.attrs = get_schema(node.op).normalize_attrs(node.attrs)
    return Module(params, {"forward": GraphMethod(graph)}, name="Tiny")


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def conv_module(x_shape, w_shape, attrs, *, bias=True, act=None, seed=0):
    """x -> conv2d (+ bias as a separate add, so fusion folds it) -> activation."""
    rng = np.random.default_rng(seed)
    g = Graph()
    x = g.add_input("x", _f32(x_shape))
    params = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    w = g.add_node("param", [], [_f32(w_shape)], {"name": "w"}).output
    y = _add(g, "conv2d", [x, w], attrs)
    if bias:
        params["b"] = rng.standard_normal((1, w_shape[0], 1, 1)).astype(np.float32)
        b = g.add_node("param", [], [_f32((1, w_shape[0], 1, 1))], {"name": "b"}).output
        y = _add(g, "add", [y, b])
    if act is not None:
        y = _add(g, act[0], [y], act[1])
    g.set_outputs([y])
    return _module(g, params)


def run_glow(module, *inputs, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    handles = glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})
    return handles["forward"], glow.lowerkit_execute(handle=handles["forward"], inputs=list(inputs))


def assert_close(got, expected, tol=1e-4):
    assert got.shape == expected.shape
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol * scale)


# (x shape, weight shape, conv attrs): depthwise 3x3 padding 1 (flat passes: 7x7, odd
# sizes, the smallest planes, rows shorter or taller than wide), small planes otherwise
# (channels-last), depthwise 3x3 rows (stride 2, odd sizes), depthwise 5x5 and dilated, grouped
# with several channels per group, channel multiplier 2, channels-last kernel rows of 5, 7 and
# 3x5 taps, and the unpadded 3x3 channels-last expression.
GROUPED = [
    ((1, 8, 7, 7), (8, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 8}),
    ((3, 5, 9, 6), (5, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 5}),
    ((1, 6, 37, 41), (6, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 6}),
    ((2, 4, 45, 39), (4, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 4}),
    ((2, 4, 40, 33), (4, 1, 3, 3), {"stride": (2, 2), "padding": (0, 1, 1, 0), "groups": 4}),
    ((1, 3, 11, 10), (3, 1, 5, 5), {"padding": (2, 2, 2, 2), "groups": 3}),
    ((2, 4, 36, 35), (4, 1, 5, 5), {"stride": (2, 2), "padding": (2, 2, 2, 2), "groups": 4}),
    ((1, 4, 13, 12), (4, 1, 3, 3), {"padding": (2, 1, 2, 1), "dilation": (2, 1), "groups": 4}),
    ((2, 6, 9, 8), (9, 2, 3, 3), {"stride": (2, 1), "padding": (2, 0, 1, 3), "dilation": (1, 2), "groups": 3}),
    ((1, 4, 34, 34), (8, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 4}),
    # channels-last kernel rows: 5 taps dilated, 7 taps (the generic row), 3x5
    ((1, 6, 12, 13), (6, 1, 5, 5), {"padding": (2, 4, 2, 4), "dilation": (1, 2), "groups": 6}),
    ((2, 5, 10, 9), (5, 1, 7, 7), {"padding": (3, 3, 3, 3), "groups": 5}),
    ((1, 7, 9, 11), (7, 1, 3, 5), {"stride": (2, 1), "padding": (1, 2, 1, 2), "groups": 7}),
    ((2, 6, 9, 8), (6, 1, 3, 3), {"groups": 6}),
    ((2, 5, 3, 3), (5, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 5}),
    ((1, 3, 3, 7), (3, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 3}),
    ((3, 2, 6, 4), (2, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 2}),
    # 5x5 phases: stride 2 with uneven padding, stride 1 on a plane smaller than the kernel
    ((1, 5, 9, 12), (5, 1, 5, 5), {"stride": (2, 2), "padding": (0, 1, 2, 3), "groups": 5}),
    ((2, 3, 3, 4), (3, 1, 5, 5), {"padding": (2, 0, 1, 2), "groups": 3}),
    # stride 2 on the phases of even planes (odd ones keep the rows): rows of 7 and 5 output
    # columns (split one pair at a time), of 8 (one vector of pairs) and of 19 (two and three)
    ((2, 5, 14, 14), (5, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 5}),
    ((1, 3, 4, 10), (3, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 0, 0), "groups": 3}),
    ((1, 3, 38, 16), (3, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 3}),
    ((2, 4, 20, 38), (4, 1, 3, 3), {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 4}),
    # 5x5 phases, stride 2, a row of 13 pairs between the padded edges
    ((1, 3, 12, 30), (3, 1, 5, 5), {"stride": (2, 2), "padding": (2, 2, 2, 2), "groups": 3}),
]
ACTS = [None, ("relu", {}), ("relu6", {}), ("clip", {"min": -0.5, "max": 0.25}), ("hardswish", {}), ("silu", {}),
        ("gelu", {}), ("hardsigmoid", {"alpha": 0.2, "beta": 0.4}), ("gelu", {"approximate": "tanh"}), ("sigmoid", {})]


@pytest.mark.parametrize("threads", [1, 2, "team"])
@pytest.mark.parametrize("case", range(len(GROUPED)))
def test_grouped_conv_matches_reference(case, threads, monkeypatch):
    from lowerkit_glow_like.kernels import grouped

    monkeypatch.setattr(grouped, "PARALLEL_MIN_MACS", 0)  # exercise the bands on small shapes
    if threads == "team":  # one region per layer, batches whole (tests/glow_like/test_team.py)
        from lowerkit.backend.cpu import team_layers

        monkeypatch.setattr(team_layers, "MIN_DEPTHWISE_MACS", 0)
        monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
        threads = 2
    else:
        monkeypatch.setenv("LOWERKIT_GLOW_TEAM", "0")  # the pool's bands
    x_shape, w_shape, attrs = GROUPED[case]
    module = conv_module(x_shape, w_shape, attrs, act=ACTS[case % len(ACTS)], seed=case)
    x = np.random.default_rng(case + 10).standard_normal(x_shape).astype(np.float32)
    expected = module.run("forward", x)
    for level in (0, 2):
        _, (got,) = run_glow(module, x, opt_level=level, threads=threads)
        assert_close(got, expected)


def test_grouped_algorithm_by_shape(monkeypatch):
    from lowerkit.backend.cpu.jit import select
    from lowerkit_glow_like.kernels.grouped import grouped_algorithm

    monkeypatch.setattr(select, "rows_wanted", lambda: False)  # the CPUs without 16-float vectors

    dw = {"padding": (1, 1, 1, 1), "groups": 32}
    assert grouped_algorithm((1, 32, 112, 112), (32, 1, 3, 3), (1, 32, 112, 112), dw) == "depthwise3x3_same"
    assert grouped_algorithm((1, 32, 15, 15), (32, 1, 3, 3), (1, 32, 15, 15), dw) == "depthwise3x3_same"
    assert grouped_algorithm((1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 14, 14), dw) == "depthwise_blocked"  # <= 14x14
    s2 = {**dw, "stride": (2, 2)}
    assert grouped_algorithm((1, 32, 112, 112), (32, 1, 3, 3), (1, 32, 56, 56), s2) == "depthwise3x3_s2"
    assert grouped_algorithm((1, 32, 30, 30), (32, 1, 3, 3), (1, 32, 15, 15), s2) == "depthwise3x3_s2"
    assert grouped_algorithm((1, 8, 258, 258), (8, 1, 3, 3), (1, 8, 129, 129), s2) == "depthwise_blocked"  # > 128x128
    assert grouped_algorithm((1, 32, 28, 28), (32, 1, 3, 3), (1, 32, 14, 14), s2) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 45, 45), (32, 1, 3, 3), (1, 32, 23, 23), s2) == "depthwise_blocked"  # odd sides
    assert grouped_algorithm((1, 32, 2, 2), (32, 1, 3, 3), (1, 32, 2, 2), dw) == "depthwise_blocked"  # below 3x3
    five = {"padding": (2, 2, 2, 2), "groups": 32}
    five_s2, seven = {**five, "stride": (2, 2)}, {**five, "padding": (3,) * 4}
    assert grouped_algorithm((1, 32, 56, 56), (32, 1, 5, 5), (1, 32, 28, 28), five_s2) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 7, 7), (32, 1, 5, 5), (1, 32, 7, 7), five) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 56, 56), (32, 1, 7, 7), (1, 32, 56, 56), seven) == "depthwise_blocked"
    three_by_five = {**five, "padding": (1, 2, 1, 2)}
    assert grouped_algorithm((1, 32, 7, 7), (32, 1, 3, 5), (1, 32, 7, 7), three_by_five) == "depthwise_cl"
    assert grouped_algorithm((1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 7, 14), {**dw, "stride": (2, 1)}) == "depthwise_cl"
    assert grouped_algorithm((1, 32, 96, 96), (32, 1, 3, 3), (1, 32, 96, 96), {**dw, "dilation": (2, 2)}) == "grouped"
    assert grouped_algorithm((1, 512, 8, 8), (512, 128, 3, 3), (1, 512, 8, 8), {"groups": 4}) is None
    assert grouped_algorithm((1, 8, 8, 8), (8, 8, 3, 3), (1, 8, 8, 8), {}) is None
    # where vectors hold 16 floats: stride 1, 3x3 to 7x7, outputs at least 12 wide, any padding; 3x3 at
    # stride 2 onto 14 columns or more
    monkeypatch.setattr(select, "rows_wanted", lambda: True)
    assert grouped_algorithm((1, 32, 112, 112), (32, 1, 3, 3), (1, 32, 112, 112), dw) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 14, 14), dw) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 12, 12), (32, 1, 3, 3), (1, 32, 10, 10), {"groups": 32}) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 12, 12), {"groups": 32}) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 56, 56), (32, 1, 7, 7), (1, 32, 56, 56), seven) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 7, 7), (32, 1, 5, 5), (1, 32, 7, 7), five) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 112, 112), (32, 1, 3, 3), (1, 32, 56, 56), s2) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 28, 28), (32, 1, 3, 3), (1, 32, 14, 14), s2) == "depthwise_rows"
    assert grouped_algorithm((1, 32, 14, 14), (32, 1, 3, 3), (1, 32, 7, 7), s2) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 56, 56), (32, 1, 5, 5), (1, 32, 28, 28), five_s2) == "depthwise_blocked"
    assert grouped_algorithm((1, 32, 96, 96), (32, 1, 3, 3), (1, 32, 96, 96), {**dw, "dilation": (2, 2)}) == "grouped"


def test_eight_threads_share_one_handle():
    module = conv_module((2, 16, 20, 20), (16, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 16}, act=("relu", {}))
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((2, 16, 20, 20)).astype(np.float32) for _ in range(8)]
    expected = [module.run("forward", x) for x in xs]
    handle, _ = run_glow(module, xs[0], threads=2)
    results = from_threads(lambda i: [glow.lowerkit_execute(handle=handle, inputs=[xs[i]])[0] for _ in range(5)])
    for i in range(8):
        for got in results[i]:
            assert_close(got, expected[i])


def steady_state_extra_bytes(handle, x) -> int:
    """Peak bytes Python allocates during one warm call, minus the outputs it returns."""
    for _ in range(2):
        glow.lowerkit_execute(handle=handle, inputs=[x])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        (out,) = glow.lowerkit_execute(handle=handle, inputs=[x])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - base - out.nbytes


@pytest.mark.parametrize("x_shape, w_shape, attrs", [GROUPED[0], GROUPED[2], GROUPED[8]])
def test_steady_state_allocates_only_outputs(x_shape, w_shape, attrs):
    module = conv_module(x_shape, w_shape, attrs, act=("relu", {}))
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    handle, _ = run_glow(module, x, threads=2)
    # A few small Python objects (closures' frames, the result list) but no arrays.
    assert steady_state_extra_bytes(handle, x) < 4096


# Winograd (algo forced by the pass thresholds set to zero): odd sizes, padding, batch.
WINOGRAD = [
    ((1, 3, 9, 11), (5, 3, 3, 3), (1, 1, 1, 1)),
    ((3, 4, 8, 8), (6, 4, 3, 3), (0, 0, 0, 0)),
    ((2, 5, 13, 7), (4, 5, 3, 3), (1, 0, 1, 2)),
    ((5, 2, 4, 5), (3, 2, 3, 3), (1, 1, 1, 1)),
]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", range(len(WINOGRAD)))
def test_winograd_matches_reference(case, threads, monkeypatch):
    from lowerkit_glow_like.kernels import winograd
    from lowerkit_glow_like.passes import algorithm

    monkeypatch.setattr(algorithm, "MIN_CHANNELS", 1)
    monkeypatch.setattr(algorithm, "MIN_FLOPS", 0)
    monkeypatch.setattr(algorithm, "MIN_TILES", 1)
    monkeypatch.setattr(winograd, "_TILES", 8)  # several batch chunks, the last one partial
    x_shape, w_shape, padding = WINOGRAD[case]
    module = conv_module(x_shape, w_shape, {"padding": padding}, act=ACTS[case % len(ACTS)], seed=case)
    x = np.random.default_rng(case).standard_normal(x_shape).astype(np.float32)
    handle, (got,) = run_glow(module, x, threads=threads)
    assert any(ins.attrs.get("algo") == "winograd" for ins in handle.program.instructions)
    assert_close(got, module.run("forward", x), tol=1e-3)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(1, 7), (3, 5, 33), (2, 1000)])
def test_softmax_over_the_last_axis_matches_reference(op, shape):
    g = Graph()
    x = g.add_input("x", _f32(shape))
    g.set_outputs([_add(g, op, [x], {"dim": -1})])
    module = _module(g, {})
    xs = (np.random.default_rng(1).standard_normal(shape) * 10).astype(np.float32)
    _, (got,) = run_glow(module, xs)
    assert_close(got, module.run("forward", xs), tol=1e-5)


@pytest.mark.parametrize("op, shape, attrs", [
    ("max_pool2d", (2, 3, 11, 10), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)}),
    ("max_pool2d", (1, 4, 12, 13), {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1),
                                    "ceil_mode": True}),
    ("max_pool2d", (2, 2, 7, 9), {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1, 1, 1)}),
    ("max_pool2d", (1, 3, 8, 5), {"kernel_size": (3, 3), "stride": (2, 2)}),
    ("max_pool2d", (1, 2, 9, 8), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0, 0, 1),
                                  "dilation": (2, 1), "ceil_mode": True}),
    ("avg_pool2d", (3, 2, 9, 9), {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1, 1, 1)}),
    ("avg_pool2d", (1, 3, 10, 7), {"kernel_size": (2, 3), "stride": (2, 2), "padding": (1, 1, 1, 1),
                                   "count_include_pad": False, "ceil_mode": True}),
    ("global_avg_pool2d", (2, 5, 7, 3), {}),
])
def test_pooling_matches_reference(op, shape, attrs):
    g = Graph()
    x = g.add_input("x", _f32(shape))
    g.set_outputs([_add(g, op, [x], attrs)])
    module = _module(g, {})
    xs = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    for threads in (1, 2):
        _, (got,) = run_glow(module, xs, threads=threads)
        assert_close(got, module.run("forward", xs), tol=1e-5)


@pytest.mark.parametrize("shape, axis, affine", [((2, 5, 33), -1, 2), ((3, 4, 6, 7), 2, 1), ((1, 300), -1, 0)])
def test_layer_norm_matches_reference(shape, axis, affine):
    rng = np.random.default_rng(4)
    g = Graph()
    x = g.add_input("x", _f32(shape))
    norm_shape = shape[axis:] if axis != -1 else shape[-1:]
    params, ins = {}, [x]
    for name in ("weight", "bias")[:affine]:
        params[name] = rng.standard_normal(norm_shape).astype(np.float32)
        ins.append(g.add_node("param", [], [_f32(norm_shape)], {"name": name}).output)
    g.set_outputs([_add(g, "layer_norm", ins, {"axis": axis})])
    module = _module(g, params)
    xs = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    _, (got,) = run_glow(module, xs)
    assert_close(got, module.run("forward", xs), tol=1e-5)


@pytest.mark.parametrize("op, attrs", [("hardswish", {}), ("hardsigmoid", {}), ("silu", {}), ("gelu", {}),
                                       ("gelu", {"approximate": "tanh"}), ("erf", {})])
def test_lone_activation_runs_as_a_compiled_chain(op, attrs):
    g = Graph()
    x = g.add_input("x", _f32((2, 3, 5, 7)))
    g.set_outputs([_add(g, op, [x], attrs)])
    module = _module(g, {})
    xs = (np.random.default_rng(5).standard_normal((2, 3, 5, 7)) * 4).astype(np.float32)
    handle, (got,) = run_glow(module, xs)
    assert [ins.op for ins in handle.program.instructions] == ["glow.chain"]
    assert_close(got, module.run("forward", xs), tol=1e-5)


@pytest.mark.parametrize("act", ACTS[4:], ids=lambda a: f"{a[0]}{a[1] or ''}")
@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((2, 3, 9, 8), (4, 3, 3, 3), {"padding": (1, 1, 1, 1)}),  # im2col, activation on the output
    ((1, 4, 6, 6), (5, 4, 1, 1), {}),  # pointwise GEMM
])
def test_dense_conv_fuses_mobile_activations(x_shape, w_shape, attrs, act):
    module = conv_module(x_shape, w_shape, attrs, act=act)
    x = np.random.default_rng(9).standard_normal(x_shape).astype(np.float32)
    handle, (got,) = run_glow(module, x, threads=1)
    assert [ins.op for ins in handle.program.instructions] == ["glow.conv2d"]
    assert_close(got, module.run("forward", x), tol=2e-5)


def mixed_module(seed=0, hw=12):
    """Winograd conv + relu -> depthwise conv + silu -> max pool -> x * scale + shift, relu6
    (a chain) -> global average pool -> softmax: every compiled kernel family in one program."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}

    def param(name, shape):
        params[name] = rng.standard_normal(shape).astype(np.float32) * 0.3
        return g.add_node("param", [], [_f32(shape)], {"name": name}).output

    x = g.add_input("x", _f32((2, 8, hw, hw)))
    y = _add(g, "relu", [_add(g, "conv2d", [x, param("w1", (8, 8, 3, 3))], {"padding": (1, 1, 1, 1)})])
    y = _add(g, "silu", [_add(g, "conv2d", [y, param("w2", (8, 1, 3, 3))], {"padding": (1, 1, 1, 1), "groups": 8})])
    y = _add(g, "max_pool2d", [y], {"kernel_size": (2, 2), "stride": (2, 2)})
    y = _add(g, "relu6", [_add(g, "add", [_add(g, "mul", [y, param("s", (1, 8, 1, 1))]), param("b", (1, 8, 1, 1))])])
    y = _add(g, "reshape", [_add(g, "global_avg_pool2d", [y])], {"shape": (2, 8)})
    g.set_outputs([_add(g, "softmax", [y], {"dim": -1})])
    return _module(g, params)


def _winograd_everywhere(monkeypatch):
    from lowerkit_glow_like.passes import algorithm

    monkeypatch.setattr(algorithm, "MIN_CHANNELS", 1)
    monkeypatch.setattr(algorithm, "MIN_FLOPS", 0)
    monkeypatch.setattr(algorithm, "MIN_TILES", 1)


def test_mixed_program_uses_every_compiled_kernel_and_matches_reference(monkeypatch):
    _winograd_everywhere(monkeypatch)
    module = mixed_module()
    x = np.random.default_rng(1).standard_normal((2, 8, 12, 12)).astype(np.float32)
    handle, (got,) = run_glow(module, x, threads=2)
    ops = [(ins.op, ins.attrs.get("algo"), ins.attrs.get("act")) for ins in handle.program.instructions]
    assert ("glow.conv2d", "winograd", "relu") in ops
    assert ("glow.conv2d", "depthwise_cl", "silu") in ops or ("glow.conv2d", None, "silu") in ops
    assert any(op == "glow.chain" for op, _, _ in ops)
    assert_close(got, module.run("forward", x), tol=1e-4)


def test_mixed_program_from_eight_threads_and_no_allocation_beyond_outputs(monkeypatch):
    _winograd_everywhere(monkeypatch)
    module = mixed_module(hw=24)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, 8, 24, 24)).astype(np.float32) for _ in range(8)]
    expected = [module.run("forward", x) for x in xs]
    handle, _ = run_glow(module, xs[0], threads=2)
    # Every activation is >= 9 KB (the pooled one) and most 36 KB; what a call allocates
    # besides its output is small Python objects (pool futures, the BLAS-limit context).
    assert steady_state_extra_bytes(handle, xs[0]) < 8192
    results = from_threads(lambda i: [glow.lowerkit_execute(handle=handle, inputs=[xs[i]])[0] for _ in range(4)])
    for i in range(8):
        for got in results[i]:
            assert_close(got, expected[i], tol=1e-4)


def test_nothing_compiles_after_loading():
    """Explicit signatures: calls never add a specialisation (no JIT pause in a timed call)."""
    from lowerkit.backend.cpu import jit

    module = mixed_module()
    x = np.zeros((2, 8, 12, 12), np.float32)
    handle, _ = run_glow(module, x)
    dispatchers = [getattr(jit.load(m), name) for m in jit.KERNEL_MODULES for name in dir(jit.load(m))
                   if hasattr(getattr(jit.load(m), name), "signatures") and getattr(jit.load(m), name).signatures]
    before = {id(d): len(d.signatures) for d in dispatchers}
    for _ in range(3):
        glow.lowerkit_execute(handle=handle, inputs=[x])
    assert all(len(d.signatures) == before[id(d)] for d in dispatchers)
    with pytest.raises(TypeError, match="No matching definition"):
        jit.load("pool").global_avg_pool2d(np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 1, 1)), 0, 1)  # float64
