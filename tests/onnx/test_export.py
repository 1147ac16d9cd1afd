"""lowerkit.onnx.export: checker-valid ONNX that ONNX Runtime runs with lowerkit's results."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import lowerkit  # noqa: E402
import lowerkit.onnx  # noqa: E402
from lowerkit import ops  # noqa: E402
from lowerkit.ir import Graph, GraphMethod, Module  # noqa: E402
from lowerkit.opset import get_schema  # noqa: E402

from tests.onnx.onnx_helpers import rand, run_ort  # noqa: E402


def _check_against_ort(module: Module, *inputs: np.ndarray, method: str = "forward", opset: int = 17):
    proto = lowerkit.onnx.export(module, method=method, opset=opset)
    onnx.checker.check_model(proto, full_check=True)
    feeds = {vi.name: x for vi, x in zip(proto.graph.input, inputs)}
    expected = module.run(method, *inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = run_ort(proto, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    return proto


W = rand(4, 3, 3, 3, seed=1)
MEAN, VAR = rand(4, seed=2), np.abs(rand(4, seed=3)) + 0.5
SCALE, SHIFT = rand(4, seed=4), rand(4, seed=5)
FC_W, FC_B = rand(6, 12, seed=6), rand(6, seed=7)


def _every_op(x):
    y = ops.conv2d(x, ops.constant(W), None, stride=1, padding=1)  # [2, 4, 6, 6]
    y = ops.batch_norm(y, ops.constant(MEAN), ops.constant(VAR), ops.constant(SCALE), ops.constant(SHIFT))
    y = ops.relu6(ops.leaky_relu(y, 0.1))
    a = ops.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)  # [2, 4, 4, 4]
    b = ops.avg_pool2d(y, 2, stride=2, padding=1, count_include_pad=False)  # [2, 4, 4, 4]
    c = ops.avg_pool2d(ops.concat([a, b], dim=1), 2, stride=1)  # [2, 8, 3, 3]
    g = ops.flatten(ops.global_avg_pool2d(c), 1)  # [2, 8]
    lin2 = ops.linear(g, ops.constant(FC_W[:, :8]), ops.constant(FC_B))  # [2, 6]
    flat3 = ops.reshape(ops.flatten(c, 2), (2, 8, -1))  # [2, 8, 9]: a rank-3 linear input
    lin3 = ops.linear(flat3, ops.constant(rand(5, 9, seed=8)))  # [2, 8, 5]
    e = ops.sqrt(ops.exp(ops.tanh(lin2)))
    f = ops.div(ops.sub(ops.log(ops.add(ops.sigmoid(e), 1.0)), ops.neg(e)), 2.0)
    s = ops.softmax(ops.matmul(f, ops.constant(rand(6, 3, seed=9))), dim=0)
    t = ops.log_softmax(ops.permute(lin3, (0, 2, 1)), dim=1)
    return ops.clip(s, max=0.4), ops.mul(t, 0.5)


def test_every_exportable_op_matches_onnxruntime() -> None:
    x = rand(2, 3, 6, 6)
    module = lowerkit.trace(_every_op, x)
    used = {n.op for n in lowerkit.graph_of(module).nodes}
    assert {"conv2d", "batch_norm", "max_pool2d", "avg_pool2d", "linear", "softmax", "clip"} <= used
    _check_against_ort(module, x)


def test_small_cnn_round_trip(tmp_path) -> None:
    from lowerkit import models

    x = models.example_input("small_cnn", batch=2)
    module = lowerkit.trace(models.small_cnn(), x)
    path = tmp_path / "small_cnn.onnx"
    proto = lowerkit.onnx.export(module, path, opset=13)
    assert onnx.load(str(path)) == proto
    assert {t.name for t in proto.graph.initializer} >= set(module.parameters)
    np.testing.assert_allclose(run_ort(proto, {proto.graph.input[0].name: x})[0], module(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lowerkit.onnx.load(path)(x), module(x), rtol=1e-6, atol=1e-6)


# -- hand-built modules: calls, methods, odd outputs ------------------------------------------------------
class _Builder:
    """Builds a graph with schema-inferred types and fresh debug handles."""

    def __init__(self, first_handle: int = 0) -> None:
        self.graph = Graph()
        self.handle = first_handle

    def input(self, name: str, shape) -> object:
        from lowerkit.ir import TensorType

        return self.graph.add_input(name, TensorType("f32", tuple(shape)))

    def op(self, op: str, inputs, output_types=None, scope: str = "", **attrs):
        schema = get_schema(op)
        attrs = schema.normalize_attrs(attrs)
        types = output_types or schema.infer([v.type for v in inputs], attrs)
        node = self.graph.add_node(op, inputs, types, attrs, debug_handle=self.handle, scope=scope)
        self.handle += 1
        return node.outputs


def _module_with_calls() -> Module:
    head = _Builder(100)
    hx = head.input("x", (2, 3))
    (w,) = head.op("param", [], [lowerkit.ir.TensorType("f32", (3, 3))], name="w")
    (y,) = head.op("matmul", [hx, w], scope="head")
    head.graph.set_outputs([y])
    sub = Module({"w": rand(3, 3, seed=11)}, {"forward": GraphMethod(head.graph)}, name="Head")

    helper = _Builder(200)
    a = helper.input("a", (2, 3))
    (r,) = helper.op("relu", [a])
    helper.graph.set_outputs([r, a])  # returns its input too

    main = _Builder(0)
    x = main.input("x", (2, 3))
    (p,) = main.op("param", [], [lowerkit.ir.TensorType("f32", (2, 3))], name="bias")
    (h1,) = main.op("call", [x], [head.graph.outputs[0].type], method="forward", module="head")
    (h2,) = main.op("call", [h1], [head.graph.outputs[0].type], method="forward", module="head")
    r1, r2 = main.op("call", [h2], [r.type, a.type], method="helper")
    (out,) = main.op("add", [r1, p])
    main.graph.set_outputs([out, r2, x, p])
    return Module(
        {"bias": rand(2, 3, seed=12)},
        {"forward": GraphMethod(main.graph), "helper": GraphMethod(helper.graph)},
        {"head": sub},
        name="WithCalls",
    )


def test_calls_are_inlined_and_odd_outputs_are_copied() -> None:
    module = _module_with_calls()
    x = rand(2, 3, seed=13)
    proto = _check_against_ort(module, x)
    assert sorted(t.name for t in proto.graph.initializer) == ["bias", "head.w"]  # shared submodule weight once
    assert [n.op_type for n in proto.graph.node].count("MatMul") == 2
    assert len({o.name for o in proto.graph.output}) == 4
    assert any(n.name.startswith("head/MatMul") for n in proto.graph.node)


def test_export_one_named_method() -> None:
    module = _module_with_calls()
    proto = _check_against_ort(module, rand(2, 3), method="helper")
    assert [n.op_type for n in proto.graph.node] == ["Relu", "Identity"]


def test_unsupported_ops_are_listed_together() -> None:
    b = _Builder()
    w = b.input("w", (2, 1, 3, 3))
    g = b.input("g", (1, 2, 4, 4))
    (gi,) = b.op("conv2d_input_grad", [w, g], input_size=(1, 1, 6, 6), scope="block.conv")
    (gw,) = b.op("conv2d_weight_grad", [gi, g], weight_size=(2, 1, 3, 3))
    b.graph.set_outputs([gw])
    module = Module({}, {"forward": GraphMethod(b.graph)})
    with pytest.raises(lowerkit.UnsupportedOperatorError,
                       match=r"2 node\(s\) have no ONNX export: conv2d_input_grad \(node conv2d_input_grad #0 in block.conv\); conv2d_weight_grad"):
        lowerkit.onnx.export(module)


def test_bad_requests_raise_input_error() -> None:
    module = _module_with_calls()
    with pytest.raises(lowerkit.InputError, match="opset must be an int in 13-21, got 12"):
        lowerkit.onnx.export(module, opset=12)
    with pytest.raises(lowerkit.InputError, match="no method 'backward'"):
        lowerkit.onnx.export(module, method="backward")
    with pytest.raises(lowerkit.InputError, match="un-lowered lowerkit.Module, got str"):
        lowerkit.onnx.export("model.lkm")


def test_lowered_modules_cannot_be_exported() -> None:
    module = lowerkit.trace(lambda x: ops.relu(x), rand(2))
    lowered = lowerkit.to_backend(module, "reference")
    with pytest.raises(lowerkit.InputError, match="export the module before lowering it"):
        lowerkit.onnx.export(lowered)


def test_pooling_geometries_match_onnxruntime() -> None:
    """Pools in ceil mode are exported in floor mode with extra end padding (onnx's shape
    inference ignores the ceil-mode rule that drops windows starting in the end padding)."""
    import itertools

    mismatches = []
    grid = itertools.product([5, 7], [2, 3], [1, 2, 3, 4], [0, 1], [False, True], [False, True, None])
    for size, k, stride, pad, ceil, cip in grid:
        x = rand(1, 2, size, size, seed=size + k)

        def pool(x):
            if cip is None:  # max pool, with dilation when it fits
                return ops.max_pool2d(x, k, stride=stride, padding=pad, dilation=1 + (k == 2), ceil_mode=ceil)
            return ops.avg_pool2d(x, k, stride=stride, padding=pad, ceil_mode=ceil, count_include_pad=cip)

        module = lowerkit.trace(pool, x)
        proto = lowerkit.onnx.export(module)
        (y,) = run_ort(proto, {proto.graph.input[0].name: x})
        if y.shape != module(x).shape or not np.allclose(y, module(x), atol=1e-6):
            mismatches.append((size, k, stride, pad, ceil, cip))
    assert mismatches == []
