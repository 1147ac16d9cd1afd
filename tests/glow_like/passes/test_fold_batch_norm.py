"""Batch-norm folding alone: into conv2d (with and without bias) and into linear."""

from __future__ import annotations

import numpy as np
from tests.glow_like.helpers import assert_close, conv_bn_relu_graph, f32, module_of, rand, reference

from lowerkit.ir import Graph
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like.passes import fold_batch_norm


def test_folds_into_conv_with_and_without_bias():
    for with_bias in (True, False):
        graph, params = conv_bn_relu_graph(with_bias)
        module, x = module_of(graph, params), rand(1, 3, 6, 6)
        work = working_graph(module, "forward")
        assert fold_batch_norm(work) is True
        ops = [n.op for n in work.nodes if n.op != "constant"]
        assert ops == ["conv2d", "relu"]
        conv = next(n for n in work.nodes if n.op == "conv2d")
        assert len(conv.inputs) == 3 and conv.output.name == "bn"
        assert_close(evaluate(work, [x]), reference(module, x))


def test_folds_into_linear():
    g = Graph()
    x = g.add_input("x", f32(2, 5))
    w = g.add_node("param", [], [f32(3, 5)], {"name": "w"}).output
    y = g.add_node("linear", [x, w], [f32(2, 3)]).output
    stats = [g.add_node("param", [], [f32(3)], {"name": n}).output for n in ("m", "v", "g", "b")]
    g.set_outputs([g.add_node("batch_norm", [y, *stats], [f32(2, 3)]).output])
    rng = np.random.default_rng(0)
    params = {"w": rand(3, 5), "m": rand(3), "v": rng.uniform(0.5, 2, 3).astype(np.float32),
              "g": rand(3, seed=2), "b": rand(3, seed=3)}
    module, inp = module_of(g, params), rand(2, 5, seed=4)
    work = working_graph(module, "forward")
    assert fold_batch_norm(work) is True
    assert [n.op for n in work.nodes if n.op != "constant"] == ["linear"]
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_leaves_a_batch_norm_whose_input_has_other_users():
    graph, params = conv_bn_relu_graph()
    conv = next(n for n in graph.nodes if n.op == "conv2d")
    graph.set_outputs(graph.outputs + [conv.output])  # the conv output is needed unnormalised
    work = working_graph(module_of(graph, params), "forward")
    assert fold_batch_norm(work) is False
    assert "batch_norm" in [n.op for n in work.nodes]
