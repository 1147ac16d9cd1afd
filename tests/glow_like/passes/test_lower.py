"""Lowering alone: linear, batch_norm, relu6 and flatten into the low-level set."""

from __future__ import annotations

import numpy as np
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference

from lowerkit.ir import Graph
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like.passes import lower_high_level


def test_lowers_linear_relu6_flatten_batch_norm():
    g = Graph()
    x = g.add_input("x", f32(2, 3, 2, 2))
    stats = [g.add_node("param", [], [f32(3)], {"name": n}).output for n in ("m", "v", "g", "b")]
    bn = g.add_node("batch_norm", [x, *stats], [f32(2, 3, 2, 2)]).output
    flat = g.add_node("flatten", [bn], [f32(2, 12)], {"start_dim": 1, "end_dim": -1}).output
    w = g.add_node("param", [], [f32(5, 12)], {"name": "w"}).output
    bias = g.add_node("param", [], [f32(5)], {"name": "bias"}).output
    y = g.add_node("linear", [flat, w, bias], [f32(2, 5)]).output
    g.set_outputs([g.add_node("relu6", [y], [f32(2, 5)]).output])
    rng = np.random.default_rng(0)
    params = {"m": rand(3), "v": rng.uniform(0.5, 2, 3).astype(np.float32), "g": rand(3, seed=1),
              "b": rand(3, seed=2), "w": rand(5, 12, seed=3), "bias": rand(5, seed=4)}
    module, inp = module_of(g, params), rand(2, 3, 2, 2, seed=5) * 4
    work = working_graph(module, "forward")
    assert lower_high_level(work) is True
    ops = [n.op for n in work.nodes if n.op != "constant"]
    assert ops == ["mul", "add", "reshape", "matmul", "add", "clip"]
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_leaves_low_level_ops_alone():
    g = Graph()
    x = g.add_input("x", f32(2, 2))
    g.set_outputs([g.add_node("matmul", [x, x], [f32(2, 2)]).output])
    work = working_graph(module_of(g), "forward")
    assert lower_high_level(work) is False
    assert [n.op for n in work.nodes] == ["matmul"]
