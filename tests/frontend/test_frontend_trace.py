"""lowerkit.trace: recorded ops, names, scopes, debug handles, source lines, methods, calls."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import nn, ops
from lowerkit.tracing.api import TracedTensor

from tests.frontend.frontend_helpers import nodes_of, ops_of

X = np.ones((2, 3), np.float32)


def _line() -> int:
    """The line number of the caller."""
    return inspect.currentframe().f_back.f_lineno


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 2, 3, padding=1, rng=np.random.default_rng(0))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv1(x)) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(2, 2, 1, rng=np.random.default_rng(1))
        self.layer1 = nn.Sequential(Block(), Block())

    def forward(self, x):
        return ops.relu(self.layer1(self.stem(x)))


def test_function_trace_records_ops_inputs_and_outputs():
    m = lk.trace(lambda x, h: ops.relu(x + h), X, X)
    g = lk.graph_of(m)
    assert [v.name for v in g.inputs] == ["x", "h"]
    assert ops_of(m) == ["add", "relu"]
    assert g.outputs == [g.nodes[-1].outputs[0]]
    assert str(g.outputs[0].type) == "f32[2, 3]"
    assert list(m.methods) == ["forward"]


def test_named_function_gives_module_name():
    def my_block(x):
        return -x

    assert lk.trace(my_block, X).name == "my_block"
    assert lk.trace(lambda x: -x, X).name == "Module"


def test_nn_module_scopes_params_and_value_names():
    m = lk.trace(Net(), np.ones((1, 2, 4, 4), np.float32))
    g = lk.graph_of(m)
    scopes = [(n.op, n.scope) for n in g.nodes if n.op != "param"]
    assert scopes == [
        ("conv2d", "stem"),
        ("conv2d", "layer1.0.conv1"),
        ("relu", "layer1.0.relu"),
        ("add", "layer1.0"),
        ("conv2d", "layer1.1.conv1"),
        ("relu", "layer1.1.relu"),
        ("add", "layer1.1"),
        ("relu", ""),
    ]
    names = [n.outputs[0].name for n in g.nodes if n.op != "param"]
    assert names[:4] == ["stem", "layer1_0_conv1", "layer1_0_relu", "layer1_0_add"]
    assert names[-1] == "relu"
    params = nodes_of(m, "param")
    assert [p.attrs["name"] for p in params][:2] == ["stem.weight", "stem.bias"]
    assert params[0].outputs[0].name == "stem_weight"
    assert list(m.parameters) == [
        "stem.weight", "stem.bias",
        "layer1.0.conv1.weight", "layer1.0.conv1.bias",
        "layer1.1.conv1.weight", "layer1.1.conv1.bias",
    ]
    np.testing.assert_array_equal(m.parameters["stem.weight"], Net().stem.weight.data)


def test_debug_handles_unique_and_source_lines_point_at_user_code():
    lines = {}

    def f(x):
        a = x * 2.0; lines["mul"] = _line()  # noqa: E702
        b = ops.sigmoid(a); lines["sigmoid"] = _line()  # noqa: E702
        return a, b

    m = lk.trace(f, X)
    g = lk.graph_of(m)
    handles = [n.debug_handle for n in g.nodes]
    assert len(set(handles)) == len(handles) and min(handles) >= 0
    mul = nodes_of(m, "mul")[0]
    sig = nodes_of(m, "sigmoid")[0]
    assert mul.source.line == lines["mul"] and sig.source.line == lines["sigmoid"]
    assert mul.source.file.endswith("test_frontend_trace.py")
    assert "test_frontend_trace.py" in mul.where()


def test_source_line_inside_layer_is_the_calling_line():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4, rng=np.random.default_rng(0))

        def forward(self, x):
            line[0] = _line() + 1
            return self.fc(x)

    line = [0]
    m = lk.trace(M(), X)
    linear = nodes_of(m, "linear")[0]
    assert linear.source.line == line[0] and linear.scope == "fc"


def test_parameter_read_once_per_graph():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(np.full((2, 3), 2.0, np.float32))

        def forward(self, x):
            return x * self.w + self.w

    m = lk.trace(Twice(), X)
    assert ops_of(m) == ["param", "mul", "add"]
    assert list(m.parameters) == ["w"]


def test_shared_parameter_gets_first_name():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False, rng=np.random.default_rng(0))
            self.b = nn.Linear(3, 3, bias=False, rng=np.random.default_rng(1))
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    m = lk.trace(Tied(), X)
    assert list(m.parameters) == ["a.weight"]
    assert [p.attrs["name"] for p in nodes_of(m, "param")] == ["a.weight"]


def test_closed_over_arrays_and_scalars_become_constants():
    bias = np.arange(3, dtype=np.float32)

    m = lk.trace(lambda x: (x + bias) * 3 - bias, X)
    consts = nodes_of(m, "constant")
    assert len(consts) == 2  # bias once, 3 once
    np.testing.assert_array_equal(consts[0].attrs["value"], bias)
    scalar = consts[1].attrs["value"]
    assert scalar.shape == () and scalar.dtype == np.float32 and scalar == 3
    bias[0] = 99  # later changes do not leak into the graph
    assert consts[0].attrs["value"][0] == 0


def test_scalar_constant_takes_tensor_dtype():
    m = lk.trace(lambda x: x + 1, np.ones((2,), np.int32))
    assert nodes_of(m, "constant")[0].attrs["value"].dtype == np.int32


def test_control_flow_is_unrolled():
    def f(x):
        for _ in range(3):
            x = x + x
        if x.shape[0] == 2:
            x = -x
        return x

    assert ops_of(lk.trace(f, X)) == ["add", "add", "add", "neg"]


def test_tuple_return():
    m = lk.trace(lambda x: (ops.relu(x), ops.tanh(x)), X)
    assert m.methods["forward"].signature.returns_tuple
    assert len(lk.graph_of(m).outputs) == 2


class Accum(nn.Module):
    def accum(self, x, h):
        return x + h

    def sub_accum(self, x, h):
        return x - h

    def forward(self, x, h):
        return self.accum(x, h), self.sub_accum(x, h)


def test_methods_calling_methods():
    m = lk.trace(Accum(), methods={"accum": (X, X), "sub_accum": (X, X), "forward": (X, X)})
    assert list(m.methods) == ["accum", "sub_accum", "forward"]
    assert ops_of(m, "accum") == ["add"]
    assert ops_of(m, "sub_accum") == ["sub"]
    calls = nodes_of(m, "call")
    assert [(c.attrs["method"], c.attrs["module"]) for c in calls] == [("accum", ""), ("sub_accum", "")]
    assert [v.name for v in lk.graph_of(m, "forward").inputs] == ["x", "h"]
    handles = [n.debug_handle for meth in m.methods for n in lk.graph_of(m, meth).nodes]
    assert len(set(handles)) == len(handles)
    # the instance is left as it was: no tracing stubs remain
    assert "accum" not in vars(Accum()) and not any(k in vars(m) for k in ("accum",))


def test_method_traced_on_demand_when_called_first():
    m = lk.trace(Accum(), methods={"forward": (X, X), "accum": (X, X), "sub_accum": (X, X)})
    assert list(m.methods) == ["forward", "accum", "sub_accum"]
    assert ops_of(m, "forward") == ["call", "call"]


def test_method_call_with_wrong_types_is_an_error():
    class M(nn.Module):
        def double(self, x):
            return x + x

        def forward(self, x):
            return self.double(x.reshape(3, 2))

    with pytest.raises(lk.InputError, match=r"call of 'double' at \S+test_frontend_trace.py:\d+, input 'x': expected f32\[2, 3\], got f32\[3, 2\]"):
        lk.trace(M(), methods={"double": (X,), "forward": (X,)})


def test_recursive_method_is_an_error():
    class M(nn.Module):
        def forward(self, x):
            return self.forward(x)

    with pytest.raises(lk.InputError, match="recursion"):
        lk.trace(M(), X)


def test_stubs_removed_after_failed_trace():
    class M(nn.Module):
        def forward(self, x):
            raise RuntimeError("user bug")

    model = M()
    with pytest.raises(RuntimeError, match="user bug"):
        lk.trace(model, X)
    assert "forward" not in vars(model)


def _sub_module(op) -> lk.Module:
    return lk.trace(lambda x: op(x), X)


def test_calling_traced_modules_records_submodule_calls():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = _sub_module(ops.relu)
            self.dec = _sub_module(ops.sigmoid)

        def forward(self, x):
            return self.dec(self.enc(x) + 1.0)

    outer = Outer()
    m = lk.trace(outer, X)
    assert ops_of(m) == ["call", "constant", "add", "call"]
    calls = nodes_of(m, "call")
    assert [(c.attrs["module"], c.attrs["method"]) for c in calls] == [("enc", "forward"), ("dec", "forward")]
    assert m.submodules == {"enc": outer.enc, "dec": outer.dec}
    assert calls[0].outputs[0].type == outer.enc.signature("forward").outputs[0]


def test_closed_over_modules_of_one_kind_get_fresh_names():
    a, b = _sub_module(ops.relu), _sub_module(ops.tanh)
    m = lk.trace(lambda x: b(a(x)) + a(x), X)
    names = [c.attrs["module"] for c in nodes_of(m, "call")]
    assert names == ["module", "module_1", "module"]
    assert m.submodules["module"] is a and m.submodules["module_1"] is b


def test_calling_a_submodule_method_by_name():
    inner = lk.trace(Accum(), methods={"accum": (X, X), "sub_accum": (X, X)})
    m = lk.trace(lambda x, h: inner.sub_accum(x, h), X, X)
    call = nodes_of(m, "call")[0]
    assert call.attrs["method"] == "sub_accum" and call.attrs["module"] == "accum"


def test_calling_a_lowered_module_records_a_call(reference):
    lowered = lk.to_backend(_sub_module(ops.relu), "reference")
    m = lk.trace(lambda x: lowered(x) * 2.0, X)
    assert ops_of(m)[0] == "call" and m.submodules[nodes_of(m, "call")[0].attrs["module"]] is lowered
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(m(x), np.maximum(x, 0) * 2)


def test_unattached_nn_module_gets_fresh_scope():
    relu = nn.ReLU()
    m = lk.trace(lambda x: relu(relu(x)), X)
    assert [n.scope for n in lk.graph_of(m).nodes] == ["relu", "relu"]


def test_traced_tensor_from_another_method_is_an_error():
    leaked = []

    class M(nn.Module):
        def first(self, x):
            leaked.append(x)
            return x + x

        def forward(self, x):
            return x * leaked[0]

    with pytest.raises(lk.InputError, match="method 'first' was used while tracing method 'forward'"):
        lk.trace(M(), methods={"first": (X,), "forward": (X,)})


# -- errors -----------------------------------------------------------------------------
def test_shape_error_names_op_and_source_line():
    def f(x):
        line[0] = _line() + 1
        return x @ x

    line = [0]
    with pytest.raises(lk.InputError, match=r"matmul at \S*test_frontend_trace.py:\d+: .*f32\[2, 3\]") as info:
        lk.trace(f, X)
    assert f"test_frontend_trace.py:{line[0]}:" in str(info.value)


def test_bad_example_inputs():
    with pytest.raises(lk.InputError, match="example input 0: expected a numpy array, got list"):
        lk.trace(lambda x: x, [1.0, 2.0])
    with pytest.raises(lk.InputError, match=r"takes 2 inputs \(x, h\), got 1"):
        lk.trace(lambda x, h: x + h, X)
    with pytest.raises(lk.InputError, match="unsupported dtype"):
        lk.trace(lambda x: x, np.ones(2, np.complex64))
    with pytest.raises(lk.InputError, match="methods"):
        lk.trace(lambda x: x, X, methods={"forward": (X,)})
    with pytest.raises(lk.InputError, match="has no method 'missing'"):
        lk.trace(Accum(), methods={"missing": (X,)})
    with pytest.raises(lk.InputError, match="expects a lowerkit.nn.Module or a Python function"):
        lk.trace(42, X)


def test_untraceable_return_values():
    with pytest.raises(lk.InputError, match="its result is a set; expected a traced tensor"):
        lk.trace(lambda x: {x}, X)
    with pytest.raises(lk.InputError, match="keys name the outputs and must be non-empty strings"):
        lk.trace(lambda x: {1: x}, X)
    with pytest.raises(lk.InputError, match="output 1 is a NoneType"):
        lk.trace(lambda x: (x, None), X)


def test_data_dependent_control_flow_is_an_error():
    def f(x):
        if x:
            return x
        return -x

    with pytest.raises(lk.InputError, match=r"bool\(\) of traced value %x .*data is unknown"):
        lk.trace(f, X)
    with pytest.raises(lk.InputError, match="numpy conversion"):
        lk.trace(lambda x: np.sum(np.asarray(x)), X)


def test_scalar_that_does_not_fit_dtype():
    with pytest.raises(lk.InputError, match="does not fit the tensor dtype i32"):
        lk.trace(lambda x: x + 1.5, np.ones(2, np.int32))


def test_traced_tensor_type():
    seen = []
    lk.trace(lambda x: seen.append(x) or x, X)
    assert isinstance(seen[0], TracedTensor)


def test_function_closing_over_layers_and_parameters():
    lin = nn.Linear(3, 4, rng=np.random.default_rng(0))
    scale = nn.Parameter(np.full(4, 2.0, np.float32))
    m = lk.trace(lambda x: lin(x) * scale, X)
    assert list(m.parameters) == ["linear.weight", "linear.bias", "param"]
    assert nodes_of(m, "linear")[0].scope == "linear"
    np.testing.assert_array_equal(m.parameters["linear.weight"], lin.weight.data)


def test_varargs_input_names():
    m = lk.trace(lambda first, *rest: ops.concat([first, *rest], dim=0), X, X, X)
    assert [v.name for v in lk.graph_of(m).inputs] == ["first", "rest0", "rest1"]
    assert lk.graph_of(m).outputs[0].type.shape == (6, 3)
