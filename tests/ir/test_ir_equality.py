"""Structural graph equality and graph_diff."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ir.ir_examples import cnn_graph, example_graph
from lowerkit.ir import Graph, SourceLocation, TensorType, graph_diff, graphs_equal
from lowerkit.ir.equality import attrs_equal


def test_equal_graphs_built_twice():
    a, _ = cnn_graph()
    b, _ = cnn_graph()
    assert graphs_equal(a, b)
    assert graph_diff(a, b) == ""


def _edit(edit):
    a, _ = cnn_graph()
    b, _ = cnn_graph()
    edit(b)
    return a, b


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda g: setattr(g.nodes[3], "op", "relu6"), r"node 3 \(relu #3 vs relu6 #3\): op relu vs relu6"),
        (lambda g: g.nodes[2].attrs.update(groups=2), r"node 2 .*attribute 'groups' 1 vs 2"),
        (lambda g: g.nodes[2].attrs.pop("groups"), r"attribute 'groups' only in first"),
        (lambda g: setattr(g.nodes[1], "debug_handle", 40), r"node 1 .*debug handle 1 vs 40"),
        (lambda g: setattr(g.nodes[1], "scope", "x"), r"node 1 .*scope 'conv' vs 'x'"),
        (lambda g: setattr(g.nodes[1], "source", SourceLocation("n.py", 1)), r"source net.py:12 vs n.py:1"),
        (lambda g: g.nodes.pop(), r"node count: 9 vs 8"),
        (lambda g: setattr(g.nodes[3].outputs[0], "name", "r"), r"node 3 .*output 0: name %relu vs %r"),
        (lambda g: setattr(g.inputs[0], "type", TensorType("f64", (1, 3, 8, 8))),
         r"inputs 0: type f32\[1, 3, 8, 8\] vs f64\[1, 3, 8, 8\]"),
        (lambda g: g.nodes[2].inputs.__setitem__(2, g.nodes[0].output),
         r"node 2 .*input 2: .*reads node 1 output 0 \(%conv_bias\) vs node 0 output 0 \(%conv_weight\)"),
        (lambda g: g.set_outputs([g.nodes[5].output]),
         r"graph output 0: type f32\[1, 10\] vs f32\[1, 64\]"),
    ],
)
def test_graph_diff_names_each_difference(edit, message):
    a, b = _edit(edit)
    assert not graphs_equal(a, b)
    assert any(__import__("re").search(message, line) for line in graph_diff(a, b).splitlines()), graph_diff(a, b)


def test_names_can_be_ignored():
    a, b = _edit(lambda g: setattr(g.nodes[3].outputs[0], "name", "r"))
    assert graphs_equal(a, b, names=False)
    assert not graphs_equal(a, b)


def test_wiring_is_positional_not_by_name():
    a = example_graph("add")
    b = example_graph("add")
    b.nodes[0].inputs.reverse()
    b.inputs[0].name, b.inputs[1].name = b.inputs[1].name, b.inputs[0].name
    assert not graphs_equal(a, b, names=False)


@pytest.mark.parametrize(
    "x, y, equal",
    [
        (1, 1, True), (1, 1.0, False), (1, True, False), (0.0, -0.0, False),
        (float("nan"), float("nan"), True), ((1, 2), (1, 2), True), ((1, 2), (1, 2.0), False),
        (np.array([np.nan], np.float32), np.array([np.nan], np.float32), True),
        (np.array([1.0], np.float32), np.array([1.0], np.float64), False),
        (np.array([1.0], np.float32), np.array([[1.0]], np.float32), False),
        (np.array([0.0], np.float32), np.array([-0.0], np.float32), False),
        (np.array([1.0], np.float32), (1.0,), False),
        ("a", "a", True), ("a", "b", False),
    ],
)
def test_attribute_values_compare_strictly(x, y, equal):
    assert attrs_equal({"k": x}, {"k": y}) is equal


def test_foreign_values_are_reported():
    a = example_graph("relu")
    b = example_graph("relu")
    stray = Graph().add_input("stray", b.inputs[0].type)
    b.nodes[0].inputs[0] = stray
    assert "foreign value %stray" in graph_diff(a, b)
