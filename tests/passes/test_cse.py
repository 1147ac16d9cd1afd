"""Common-subexpression elimination alone."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, verify_graph
from lowerkit.passes import eliminate_common_subexpressions


def test_cse_merges_equal_nodes(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(4))
    a = tiny.node(g, "clip", [x], tiny.f32(4), {"min": -1.0, "max": 1.0}).output
    b = tiny.node(g, "clip", [x], tiny.f32(4), {"min": -1.0, "max": 1.0}).output
    g.set_outputs([tiny.node(g, "mul", [a, b], tiny.f32(4)).output])
    inp = tiny.rand(4) * 3
    expected = tiny.run(g.copy(), inp)
    assert eliminate_common_subexpressions(g) is True
    assert tiny.ops(g) == ["clip", "mul"]
    assert g.nodes[1].inputs[0] is g.nodes[1].inputs[1]
    verify_graph(g)
    np.testing.assert_array_equal(tiny.run(g, inp)[0], expected[0])


def test_cse_merges_equal_small_constants(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(3))
    one = tiny.const(g, np.ones(3, np.float32))
    other_one = tiny.const(g, np.ones(3, np.float32))  # another array, same content
    s = tiny.node(g, "add", [x, one], tiny.f32(3)).output
    g.set_outputs([tiny.node(g, "add", [s, other_one], tiny.f32(3)).output])
    assert eliminate_common_subexpressions(g) is True
    assert tiny.ops(g) == ["constant", "add", "add"]


def test_cse_keeps_nodes_whose_attributes_differ(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(4))
    a = tiny.node(g, "clip", [x], tiny.f32(4), {"min": -1.0, "max": 1.0}).output
    b = tiny.node(g, "clip", [x], tiny.f32(4), {"min": -2.0, "max": 1.0}).output
    g.set_outputs([tiny.node(g, "mul", [a, b], tiny.f32(4)).output])
    assert eliminate_common_subexpressions(g) is False
    assert tiny.ops(g) == ["clip", "clip", "mul"]
