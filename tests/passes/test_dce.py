"""Dead-code elimination alone."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, verify_graph
from lowerkit.passes import eliminate_dead_code


def test_dce_removes_unread_nodes(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(2, 3))
    dead = tiny.node(g, "exp", [x], tiny.f32(2, 3)).output
    tiny.node(g, "neg", [dead], tiny.f32(2, 3))  # a dead chain: both go
    g.set_outputs([tiny.node(g, "relu", [x], tiny.f32(2, 3)).output])
    before = tiny.run(g.copy(), tiny.rand(2, 3))
    assert eliminate_dead_code(g) is True
    assert tiny.ops(g) == ["relu"]
    verify_graph(g)
    np.testing.assert_array_equal(tiny.run(g, tiny.rand(2, 3))[0], before[0])


def test_dce_leaves_a_live_graph_alone(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(2, 3))
    y = tiny.node(g, "exp", [x], tiny.f32(2, 3)).output
    g.set_outputs([tiny.node(g, "relu", [y], tiny.f32(2, 3)).output, y])
    assert eliminate_dead_code(g) is False
    assert tiny.ops(g) == ["exp", "relu"]
