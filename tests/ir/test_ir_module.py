"""lowerkit.ir.module: graph_of and the call checks, with the messages users see."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from lowerkit.errors import InputError
from lowerkit.ir import Graph, GraphMethod, Module, TensorType, check_inputs, format_outputs
from lowerkit.ir.module import Signature


def _relu_module() -> Module:
    graph = Graph()
    x = graph.add_input("x", TensorType("f32", (2, 3)))
    node = graph.add_node("relu", [x], [TensorType("f32", (2, 3))], debug_handle=0)
    graph.set_outputs(node.outputs)
    return Module(methods={"forward": GraphMethod(graph)}, name="Tiny")


def test_graph_of_names_the_module_and_its_methods():
    module = _relu_module()
    assert lk.graph_of(module, "forward") is module.methods["forward"].graph
    with pytest.raises(InputError, match=r"Tiny has no method 'back' to take a graph of; its methods are \['forward'\]"):
        lk.graph_of(module, "back")


def test_graph_of_a_lowered_module_says_it_has_no_graph():
    pytest.importorskip("lowerkit_reference")
    lowered = lk.to_backend(_relu_module(), "reference")
    with pytest.raises(InputError, match=r"method 'forward' of Tiny is lowered to a backend and has no graph \(backend 'reference'\)"):
        lk.graph_of(lowered, "forward")


def test_graph_of_an_nn_module_says_to_trace_it():
    with pytest.raises(InputError, match=r"graph_of expects a lowerkit.Module, got SmallCNN; trace it first"):
        lk.graph_of(models.small_cnn(), "forward")


def test_format_outputs_checks_dtype_and_shape():
    sig = Signature((("x", TensorType("f32", (2,))),), (TensorType("f32", (2,)),))
    out = np.zeros(2, np.float32)
    assert format_outputs("forward", sig, [out]) is out
    with pytest.raises(InputError, match=r"method 'forward', output 0: expected f32\[2\], got float64\[2\]"):
        format_outputs("forward", sig, [np.zeros(2)])
    with pytest.raises(InputError, match=r"output 0: expected f32\[2\], got float32\[3\]"):
        format_outputs("forward", sig, [np.zeros(3, np.float32)])
    with pytest.raises(InputError, match=r"output 0: expected f32\[2\], got >f4\[2\]"):
        format_outputs("forward", sig, [np.zeros(2, ">f4")])


def test_a_missing_method_attribute_lists_the_methods():
    module = _relu_module()
    with pytest.raises(AttributeError, match=r"Module has no attribute or method 'fwd'; its methods are \['forward'\]"):
        module.fwd
    assert not hasattr(module, "fwd")


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copies_of_a_module_that_ran_compile_their_own_runtime(copier):
    pytest.importorskip("lowerkit_reference")
    t = TensorType("f32", (2, 3))
    graph = Graph()
    x_in = graph.add_input("x", t)
    w = graph.add_node("param", [], [t], {"name": "w"}, debug_handle=0).output
    graph.set_outputs(graph.add_node("add", [x_in, w], [t], debug_handle=1).outputs)
    module = Module({"w": np.ones((2, 3), np.float32)}, {"forward": GraphMethod(graph)}, name="AddW")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    expected = module(x)  # compiles the module on reference
    twin = copier(module)
    assert twin._runtime_cache is None
    np.testing.assert_array_equal(twin(x), expected)
    np.testing.assert_array_equal(twin.parameters["w"], module.parameters["w"])
    assert not twin.parameters["w"].flags.writeable
    if copier is copy.deepcopy:
        assert lk.graph_of(twin) is not lk.graph_of(module)
        assert lk.ir.graphs_equal(lk.graph_of(twin), lk.graph_of(module))


def test_check_inputs_names_non_array_inputs():
    sig = Signature((("x", TensorType("f32", (2, 2))),), (TensorType("f32", (2, 2)),))
    with pytest.raises(InputError, match=r"method 'forward', input 'x': expected f32\[2, 2\], got a list that is not an array"):
        check_inputs("forward", sig, [[[1.0, 2.0], [3.0]]])
    with pytest.raises(InputError, match=r"input 'x': expected f32\[2, 2\], got f64\[2, 2\] \(from a list\)"):
        check_inputs("forward", sig, [[[1.0, 2.0], [3.0, 4.0]]])
    with pytest.raises(InputError, match=r"input 'x': expected f32\[2, 2\], got object\[\] \(from a dict\)"):
        check_inputs("forward", sig, [{"x": 1}])
    (array,) = check_inputs("forward", sig, [np.ones((2, 2), np.float32)])
    assert array.dtype == np.float32
