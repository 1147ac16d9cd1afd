"""The IR interpreter on small hand-built graphs: structural ops, calls, errors, freeing."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from lowerkit.errors import InputError, NodeExecutionError, UnsupportedOperatorError
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.ir.interpreter import Interpreter, last_uses
from lowerkit.opset import get_schema

F32_4 = TensorType("f32", (4,))


class Builder:
    """Adds nodes with normalised attributes, inferred types and fresh debug handles."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.handle = 0

    def input(self, name: str, type: TensorType = F32_4):
        return self.graph.add_input(name, type)

    def node(self, op: str, inputs=(), types=None, **attrs):
        schema = get_schema(op)
        attrs = schema.normalize_attrs(attrs)
        if types is None:
            types = schema.infer([v.type for v in inputs], attrs)
        self.handle += 1
        node = self.graph.add_node(op, list(inputs), types, attrs, debug_handle=self.handle)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def method(self, *outputs) -> GraphMethod:
        self.graph.set_outputs(outputs)
        return GraphMethod(self.graph)


def numpy_kernels():
    return {
        "add": lambda args, attrs: args[0] + args[1],
        "mul": lambda args, attrs: args[0] * args[1],
        "relu": lambda args, attrs: np.maximum(args[0], np.float32(0)),
        "neg": lambda args, attrs: -args[0],
    }


def arange4(offset: float = 0.0) -> np.ndarray:
    return np.arange(4, dtype=np.float32) + np.float32(offset)


def test_param_constant_and_kernels():
    b = Builder()
    x = b.input("x")
    w = b.node("param", types=[F32_4], name="w")
    c = b.node("constant", value=np.full(4, -3, np.float32))
    y = b.node("relu", [b.node("add", [b.node("mul", [x, w]), c])])
    module = Module({"w": np.full(4, 2, np.float32)}, {"forward": b.method(y)})
    (out,) = Interpreter(module, numpy_kernels()).run("forward", [arange4()])
    np.testing.assert_array_equal(out, [0, 0, 1, 3])


def test_call_same_module_with_two_outputs():
    pair = Builder()
    a = pair.input("a")
    pair_method = pair.method(pair.node("neg", [a]), pair.node("add", [a, a]))
    main = Builder()
    x = main.input("x")
    neg, double = main.node("call", [x], types=[F32_4, F32_4], method="pair")
    module = Module({}, {"pair": pair_method, "forward": main.method(main.node("add", [neg, double]))})
    (out,) = Interpreter(module, numpy_kernels()).run("forward", [arange4(1)])
    np.testing.assert_array_equal(out, arange4(1))  # -x + 2x


class FakeLowered:
    """Stands in for a LoweredModule: anything with run(method, *args)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, method, *args):
        self.calls.append(method)
        return args[0] * 10 if method == "scale" else (args[0], args[0] + 1)


@pytest.mark.parametrize("method, n_out", [("scale", 1), ("split", 2)])
def test_call_submodule_normalises_outputs(method, n_out):
    b = Builder()
    x = b.input("x")
    outs = b.node("call", [x], types=[F32_4] * n_out, method=method, module="sub")
    outs = [outs] if n_out == 1 else outs
    sub = FakeLowered()
    module = Module({}, {"forward": b.method(*outs)}, submodules={"sub": sub})
    result = Interpreter(module, {}).run("forward", [arange4()])
    assert sub.calls == [method]
    assert len(result) == n_out
    np.testing.assert_array_equal(result[0], arange4() * (10 if n_out == 1 else 1))


def test_call_submodule_module_runs_on_reference():
    pytest.importorskip("lowerkit_reference")
    inner = Builder()
    a = inner.input("a")
    sub = Module({}, {"forward": inner.method(inner.node("neg", [a]))}, name="Inner")
    outer = Builder()
    x = outer.input("x")
    y = outer.node("call", [x], types=[F32_4], method="forward", module="inner")
    module = Module({}, {"forward": outer.method(y)}, submodules={"inner": sub})
    (out,) = Interpreter(module, {}).run("forward", [arange4()])
    np.testing.assert_array_equal(out, -arange4())


def test_run_node_is_the_one_override():
    class Counting(Interpreter):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.ops: list[str] = []

        def run_node(self, node, args):
            self.ops.append(node.op)
            return super().run_node(node, args)

    b = Builder()
    x = b.input("x")
    module = Module({}, {"forward": b.method(b.node("neg", [b.node("relu", [x])]))})
    interp = Counting(module, numpy_kernels())
    interp.run("forward", [arange4()])
    assert interp.ops == ["relu", "neg"]


def test_values_are_freed_after_their_last_use():
    # A chain relu -> neg -> sqrt -> tanh (plus an unused exp): when tanh runs, the outputs
    # of relu and neg must already be garbage; tanh's input (sqrt) is alive.
    refs: dict[str, weakref.ref] = {}
    alive_at_last: dict[str, bool] = {}

    def record(name):
        def kernel(args, attrs):
            gc.collect()
            if name == "n4":
                alive_at_last.update({k: r() is not None for k, r in refs.items()})
            out = args[0] + np.float32(1)
            refs[name] = weakref.ref(out)
            return out

        return kernel

    b = Builder()
    x = b.input("x")
    v1 = b.node("relu", [x])
    v2 = b.node("neg", [v1])
    v3 = b.node("sqrt", [v2])
    b.node("exp", [v1])  # unused output: must die immediately too
    v4 = b.node("tanh", [v3])
    kernels = {"relu": record("n1"), "neg": record("n2"), "sqrt": record("n3"), "exp": record("dead"), "tanh": record("n4")}
    module = Module({}, {"forward": b.method(v4)})
    (out,) = Interpreter(module, kernels).run("forward", [arange4()])
    assert alive_at_last == {"n1": False, "n2": False, "n3": True, "dead": False}
    assert refs["n4"]() is out
    np.testing.assert_array_equal(out, arange4(4))


def test_last_uses_keeps_graph_outputs():
    b = Builder()
    x, unused = b.input("x"), b.input("unused")
    v1 = b.node("relu", [x])
    v2 = b.node("neg", [v1])
    b.graph.set_outputs([v1, v2])
    dead = last_uses(b.graph)
    assert [[v.name for v in d] for d in dead] == [["x", "unused"], []]


def test_missing_kernel_names_the_node():
    b = Builder()
    x = b.input("x")
    module = Module({}, {"forward": b.method(b.node("sigmoid", [x]))})
    with pytest.raises(UnsupportedOperatorError, match=r"node sigmoid #1: no kernel for op 'sigmoid'"):
        Interpreter(module, numpy_kernels()).run("forward", [arange4()])


def test_kernel_failure_and_wrong_dtype_blame_the_node():
    b = Builder()
    x = b.input("x")
    module = Module({}, {"forward": b.method(b.node("neg", [b.node("relu", [x])]))})
    broken = dict(numpy_kernels(), neg=lambda args, attrs: 1 / 0)
    with pytest.raises(NodeExecutionError, match="node neg #2: kernel neg failed: division by zero") as info:
        Interpreter(module, broken).run("forward", [arange4()])
    assert info.value.debug_handle == 2
    widening = dict(numpy_kernels(), relu=lambda args, attrs: args[0].astype(np.float64))
    with pytest.raises(NodeExecutionError, match=r"kernel relu returned float64\[4\] .* expected f32\[4\]"):
        Interpreter(module, widening).run("forward", [arange4()])


def test_bad_param_and_input_count():
    b = Builder()
    x = b.input("x")
    w = b.node("param", types=[F32_4], name="missing")
    module = Module({}, {"forward": b.method(b.node("add", [x, w]))}, name="Net")
    interp = Interpreter(module, numpy_kernels())
    with pytest.raises(InputError, match="module Net has no parameter 'missing'"):
        interp.run("forward", [arange4()])
    with pytest.raises(InputError, match="method 'forward' takes 1 inputs, got 2"):
        interp.run("forward", [arange4(), arange4()])


def test_method_free_lists_are_computed_once_per_interpreter(monkeypatch):
    import lowerkit.ir.interpreter as interpreter_module

    calls = []
    real = interpreter_module.last_uses
    monkeypatch.setattr(interpreter_module, "last_uses", lambda graph: calls.append(graph) or real(graph))
    b = Builder()
    x = b.input("x")
    module = Module({}, {"forward": b.method(b.node("relu", [b.node("neg", [x])]))}, name="Net")
    interp = Interpreter(module, numpy_kernels())
    for _ in range(3):
        (out,) = interp.run("forward", [arange4()])
        np.testing.assert_array_equal(out, np.maximum(-arange4(), 0))
    assert calls == [module.methods["forward"].graph]
    other = Builder()
    y = other.input("y")
    free_graph = other.method(other.node("neg", [y])).graph
    interp.run_graph(free_graph, [arange4()])
    interp.run_graph(free_graph, [arange4()])
    assert calls.count(free_graph) == 2  # graphs outside the module's methods are not cached


def test_interpreter_without_a_module_runs_free_graphs_and_refuses_params():
    g = Graph()
    x = g.add_input("x", TensorType("f32", (4,)))
    g.set_outputs([g.add_node("neg", [x], [TensorType("f32", (4,))]).output])
    (out,) = Interpreter(None, numpy_kernels()).run_graph(g, [arange4()])
    np.testing.assert_array_equal(out, -arange4())
    p = Graph()
    p.set_outputs([p.add_node("param", [], [TensorType("f32", (4,))], {"name": "w"}).output])
    with pytest.raises(InputError, match=r"no module bound: cannot read parameter 'w'"):
        Interpreter(None, {}).run_graph(p, [])
    with pytest.raises(InputError, match=r"no module bound: cannot run method 'forward'"):
        Interpreter(None, {}).run("forward", [])
