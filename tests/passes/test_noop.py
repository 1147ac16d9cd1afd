"""No-op reshape elimination alone."""

from __future__ import annotations

import numpy as np

from lowerkit.ir import Graph, verify_graph
from lowerkit.passes import eliminate_dead_code, eliminate_noop_reshapes


def test_identity_reshapes_vanish_and_chains_collapse(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(2, 3, 4))
    same = tiny.node(g, "reshape", [x], tiny.f32(2, 3, 4), {"shape": (2, 3, 4)}).output
    ident = tiny.node(g, "transpose", [same], tiny.f32(2, 3, 4), {"perm": (0, 1, 2)}).output
    flat = tiny.node(g, "flatten", [ident], tiny.f32(2, 12), {"start_dim": 1, "end_dim": -1}).output
    g.set_outputs([tiny.node(g, "reshape", [flat], tiny.f32(6, 4), {"shape": (6, 4)}).output])
    inp = tiny.rand(2, 3, 4)
    expected = tiny.run(g.copy(), inp)
    assert eliminate_noop_reshapes(g) is True
    eliminate_dead_code(g)
    assert tiny.ops(g) == ["reshape"]
    assert g.nodes[0].inputs[0] is g.inputs[0]
    verify_graph(g)
    np.testing.assert_array_equal(tiny.run(g, inp)[0], expected[0])


def test_real_transposes_and_reshapes_stay(tiny):
    g = Graph()
    x = g.add_input("x", tiny.f32(2, 3))
    t = tiny.node(g, "transpose", [x], tiny.f32(3, 2), {"perm": (1, 0)}).output
    g.set_outputs([tiny.node(g, "reshape", [t], tiny.f32(6), {"shape": (6,)}).output])
    assert eliminate_noop_reshapes(g) is False
    assert tiny.ops(g) == ["transpose", "reshape"]
