"""Graph.copy: equal structure, fresh objects, independent of the original."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, graphs_equal


def _graph(tiny) -> Graph:
    g = Graph()
    x = g.add_input("x", tiny.f32(2, 3))
    w = tiny.const(g, tiny.rand(2, 3))
    y = tiny.node(g, "add", [x, w], tiny.f32(2, 3)).output
    z = tiny.node(g, "clip", [y], tiny.f32(2, 3), {"min": 0.0, "max": 1.0}).output
    g.set_outputs([z, y])
    return g


def test_copy_is_equal_and_shares_no_values_or_nodes(tiny):
    g = _graph(tiny)
    c = g.copy()
    assert graphs_equal(g, c)
    values = lambda graph: [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]  # noqa: E731
    assert not set(values(g)) & set(values(c))  # values and nodes hash by identity
    assert not set(g.nodes) & set(c.nodes)
    assert all(a.attrs is not b.attrs for a, b in zip(g.nodes, c.nodes))
    assert c.outputs[1] is c.nodes[1].output  # links point inside the copy
    inp = tiny.rand(2, 3, seed=1)
    for a, b in zip(tiny.run(g, inp), tiny.run(c, inp)):
        np.testing.assert_array_equal(a, b)


def test_editing_the_copy_leaves_the_original(tiny):
    g = _graph(tiny)
    text = str(g)
    c = g.copy()
    c.nodes[1].attrs["max"] = 2.0
    c.nodes[0].output.name = "renamed"
    c.replace_all_uses(c.nodes[1].output, c.inputs[0])
    c.nodes.pop()
    c.add_node("relu", [c.inputs[0]], [tiny.f32(2, 3)])
    assert str(g) == text
    assert not graphs_equal(g, c)


def test_copy_creates_the_names_the_original_would(tiny):
    g = _graph(tiny)
    c = g.copy()
    assert c.namespace.create("add") == g.namespace.create("add")
