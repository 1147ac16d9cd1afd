"""The reference backend plugin: its hooks, its entry point, and modules run through it."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, Node, TensorType, Value
from lowerkit.ir.interpreter import Interpreter
from lowerkit.opset import all_schemas, get_schema

ref = pytest.importorskip("lowerkit_reference")

F32_4 = TensorType("f32", (4,))


def two_method_module() -> Module:
    """``accum(x, h) = x * w + h`` and ``forward(x, h)`` returning ``(accum(x, h), -x)``."""
    accum = Graph()
    x, h = accum.add_input("x", F32_4), accum.add_input("h", F32_4)
    w = accum.add_node("param", [], [F32_4], {"name": "w"}, debug_handle=1).output
    xw = accum.add_node("mul", [x, w], [F32_4], debug_handle=2).output
    accum.set_outputs([accum.add_node("add", [xw, h], [F32_4], debug_handle=3).output])
    fwd = Graph()
    x, h = fwd.add_input("x", F32_4), fwd.add_input("h", F32_4)
    acc = fwd.add_node("call", [x, h], [F32_4], {"method": "accum", "module": ""}, debug_handle=4).output
    neg = fwd.add_node("neg", [x], [F32_4], debug_handle=5).output
    fwd.set_outputs([acc, neg])
    return Module(
        {"w": np.full(4, 3, np.float32)},
        {"accum": GraphMethod(accum), "forward": GraphMethod(fwd, returns_tuple=True)},
        name="TwoMethods",
    )


def test_entry_point_names_the_module():
    (ep,) = [e for e in entry_points(group="lowerkit.backends") if e.name == "reference"]
    assert ep.value == "lowerkit_reference"
    assert ep.load() is ref


def test_hooks_round_trip_through_the_file_format():
    module = two_method_module()
    spec = {"accum": {}, "forward": {}}
    payload = ref.lowerkit_preprocess(module=module, compile_spec=spec)
    assert isinstance(payload, bytes) and payload == lk.dumps(module)
    handles = ref.lowerkit_compile(processed=payload, compile_spec=spec)
    assert sorted(handles) == ["accum", "forward"]
    x, h = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    acc, neg = ref.lowerkit_execute(handle=handles["forward"], inputs=[x, h])
    np.testing.assert_array_equal(acc, x * 3 + 1)
    np.testing.assert_array_equal(neg, -x)
    (only,) = ref.lowerkit_execute(handle=handles["accum"], inputs=[x, h])
    np.testing.assert_array_equal(only, acc)
    assert ref.lowerkit_is_available() is True


def test_module_runs_on_reference():
    module = two_method_module()
    x, h = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    acc, neg = module(x, h)
    np.testing.assert_array_equal(acc, x * 3 + 1)
    np.testing.assert_array_equal(module.accum(x, h), acc)


def test_every_registry_op_is_supported():
    for schema in all_schemas():
        node = Node(schema.name, [], [Value("y", F32_4)])
        assert ref.lowerkit_is_supported(node=node) is True, schema.name
    assert ref.lowerkit_is_supported(node=Node("fft", [], [])) is False


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_kernels_keep_the_schema_dtype(dtype):
    # conv -> batch_norm -> relu6 -> avg_pool -> flatten -> linear -> log_softmax in f64 and f32
    np_dtype = np.dtype({"f32": np.float32, "f64": np.float64}[dtype])
    rng = np.random.default_rng(1)
    g = Graph()
    handle = iter(range(1, 100))
    params: dict[str, np.ndarray] = {}

    def add(op, inputs, **attrs):
        schema = get_schema(op)
        attrs = schema.normalize_attrs(attrs)
        types = schema.infer([v.type for v in inputs], attrs)
        return g.add_node(op, inputs, types, attrs, debug_handle=next(handle)).output

    def param(name, *shape):
        params[name] = rng.standard_normal(shape).astype(np_dtype)
        return g.add_node("param", [], [TensorType(dtype, shape)], {"name": name}, debug_handle=next(handle)).output

    x = g.add_input("x", TensorType(dtype, (2, 3, 9, 9)))
    y = add("conv2d", [x, param("cw", 4, 3, 3, 3), param("cb", 4)], stride=(2, 2), padding=(1, 1, 1, 1))
    y = add("batch_norm", [y, param("m", 4), add("exp", [param("lv", 4)]), param("bw", 4), param("bb", 4)])
    y = add("relu6", [y])
    y = add("avg_pool2d", [y], kernel_size=(2, 2), stride=(2, 2), ceil_mode=True)
    y = add("flatten", [y])
    y = add("linear", [y, param("fw", 5, 36)])
    g.set_outputs([add("log_softmax", [y])])
    module = Module(params, {"forward": GraphMethod(g)})
    out = module(rng.standard_normal((2, 3, 9, 9)).astype(np_dtype))
    assert out.dtype == np_dtype and out.shape == (2, 5)
    np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0, rtol=1e-5)


def test_traced_resnet18_runs():
    models = pytest.importorskip("lowerkit.models")
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    module = lk.trace(models.resnet18(num_classes=10), x)
    out = module(x)
    assert out.shape == (1, 10) and out.dtype == np.float32 and np.isfinite(out).all()
    (direct,) = Interpreter(module, ref.KERNELS).run("forward", [x])
    np.testing.assert_array_equal(out, direct)


def test_reference_refuses_options_it_does_not_have():
    import lowerkit as lk
    from lowerkit.ir import Graph, GraphMethod, Module, TensorType

    t = TensorType("f32", (2,))
    g = Graph()
    g.set_outputs([g.add_node("relu", [g.add_input("x", t)], [t], debug_handle=0).output])
    module = Module({}, {"forward": GraphMethod(g)}, name="Tiny")
    with pytest.raises(lk.InputError, match=r"'reference' takes no options.*\['threads'\]"):
        lk.to_backend(module, "reference", {"forward": {"threads": 2}})
