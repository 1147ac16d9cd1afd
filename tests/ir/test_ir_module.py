"""lowerkit.ir.module: graph_of and the call checks, with the messages users see."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from lowerkit.errors import InputError
from lowerkit.ir import Graph, GraphMethod, Module, TensorType, format_outputs
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
