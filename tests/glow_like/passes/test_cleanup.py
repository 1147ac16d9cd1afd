"""The cleanup passes alone: dead code, common subexpressions, no-op reshapes, constant folding."""

from __future__ import annotations

import numpy as np
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference

from lowerkit.ir import Graph
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like.passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    eliminate_noop_reshapes,
    fold_constants,
)


def _ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_dce_removes_unread_nodes_and_keeps_results():
    g = Graph()
    x = g.add_input("x", f32(2, 3))
    g.add_node("exp", [x], [f32(2, 3)])  # read by nobody
    g.set_outputs([g.add_node("relu", [x], [f32(2, 3)]).output])
    module, inp = module_of(g), rand(2, 3)
    work = working_graph(module, "forward")
    assert eliminate_dead_code(work) is True
    assert _ops(work) == ["relu"]
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_dce_leaves_a_graph_without_dead_code_alone():
    g = Graph()
    x = g.add_input("x", f32(2, 3))
    g.set_outputs([g.add_node("relu", [x], [f32(2, 3)]).output])
    work = working_graph(module_of(g), "forward")
    assert eliminate_dead_code(work) is False
    assert _ops(work) == ["relu"]


def test_cse_merges_equal_nodes_and_keeps_results():
    g = Graph()
    x = g.add_input("x", f32(4))
    a = g.add_node("clip", [x], [f32(4)], {"min": -1.0, "max": 1.0}).output
    b = g.add_node("clip", [x], [f32(4)], {"min": -1.0, "max": 1.0}).output
    g.set_outputs([g.add_node("mul", [a, b], [f32(4)]).output])
    module, inp = module_of(g), rand(4) * 3
    work = working_graph(module, "forward")
    assert eliminate_common_subexpressions(work) is True
    assert _ops(work) == ["clip", "mul"]
    mul = work.nodes[1]
    assert mul.inputs[0] is mul.inputs[1]
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_cse_keeps_nodes_whose_attributes_differ():
    g = Graph()
    x = g.add_input("x", f32(4))
    a = g.add_node("clip", [x], [f32(4)], {"min": -1.0, "max": 1.0}).output
    b = g.add_node("clip", [x], [f32(4)], {"min": -2.0, "max": 1.0}).output
    g.set_outputs([g.add_node("mul", [a, b], [f32(4)]).output])
    work = working_graph(module_of(g), "forward")
    assert eliminate_common_subexpressions(work) is False
    assert len(work.nodes) == 3


def test_noop_reshapes_vanish_and_chains_collapse():
    g = Graph()
    x = g.add_input("x", f32(2, 3, 4))
    same = g.add_node("reshape", [x], [f32(2, 3, 4)], {"shape": (2, 3, 4)}).output
    ident = g.add_node("transpose", [same], [f32(2, 3, 4)], {"perm": (0, 1, 2)}).output
    flat = g.add_node("flatten", [ident], [f32(2, 12)], {"start_dim": 1, "end_dim": -1}).output
    back = g.add_node("reshape", [flat], [f32(6, 4)], {"shape": (6, 4)}).output
    g.set_outputs([back])
    module, inp = module_of(g), rand(2, 3, 4)
    work = working_graph(module, "forward")
    assert eliminate_noop_reshapes(work) is True
    eliminate_dead_code(work)
    assert _ops(work) == ["reshape"]
    assert work.nodes[0].inputs[0] is work.inputs[0]
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_noop_pass_leaves_real_transposes_alone():
    g = Graph()
    x = g.add_input("x", f32(2, 3))
    g.set_outputs([g.add_node("transpose", [x], [f32(3, 2)], {"perm": (1, 0)}).output])
    work = working_graph(module_of(g), "forward")
    assert eliminate_noop_reshapes(work) is False
    assert _ops(work) == ["transpose"]


def test_constant_folding_evaluates_parameter_only_subgraphs():
    g = Graph()
    x = g.add_input("x", f32(3, 2))
    w = g.add_node("param", [], [f32(2, 3)], {"name": "w"}).output
    wt = g.add_node("transpose", [w], [f32(3, 2)], {"perm": (1, 0)}).output
    scaled = g.add_node("exp", [wt], [f32(3, 2)]).output
    g.set_outputs([g.add_node("add", [x, scaled], [f32(3, 2)]).output])
    module = module_of(g, {"w": rand(2, 3, seed=3)})
    inp = rand(3, 2)
    work = working_graph(module, "forward")
    assert fold_constants(work) is True
    eliminate_dead_code(work)
    assert _ops(work) == ["constant", "add"]
    np.testing.assert_allclose(work.nodes[0].attrs["value"], np.exp(module.parameters["w"].T), rtol=1e-6)
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_constant_folding_leaves_input_dependent_nodes():
    g = Graph()
    x = g.add_input("x", f32(3))
    g.set_outputs([g.add_node("exp", [x], [f32(3)]).output])
    work = working_graph(module_of(g), "forward")
    assert fold_constants(work) is False
    assert _ops(work) == ["exp"]
