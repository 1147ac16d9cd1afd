"""Fusion alone: matmul + bias -> glow.fc, conv/fc/add + activation -> one instruction."""

from __future__ import annotations

from tests.glow_like.helpers import assert_close, conv_bn_relu_graph, f32, module_of, rand, reference

from lowerkit.ir import Graph
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like.passes import fold_batch_norm, fuse_activations, fuse_bias, lower_high_level


def _ops(graph):
    return [n.op for n in graph.nodes if n.op != "constant"]


def test_conv_relu_fuses_into_one_instruction():
    graph, params = conv_bn_relu_graph()
    module, x = module_of(graph, params), rand(1, 3, 6, 6)
    work = working_graph(module, "forward")
    fold_batch_norm(work)
    assert fuse_activations(work) is True
    assert _ops(work) == ["glow.conv2d"]
    conv = next(n for n in work.nodes if n.op == "glow.conv2d")
    assert conv.attrs["act"] == "relu" and conv.output is work.outputs[0]
    assert_close(evaluate(work, [x]), reference(module, x))


def test_linear_bias_relu6_fuses_into_fc():
    g = Graph()
    x = g.add_input("x", f32(2, 4))
    w = g.add_node("param", [], [f32(3, 4)], {"name": "w"}).output
    b = g.add_node("param", [], [f32(3)], {"name": "b"}).output
    y = g.add_node("linear", [x, w, b], [f32(2, 3)]).output
    g.set_outputs([g.add_node("relu6", [y], [f32(2, 3)]).output])
    module, inp = module_of(g, {"w": rand(3, 4), "b": rand(3, seed=1)}), rand(2, 4, seed=2) * 5
    work = working_graph(module, "forward")
    lower_high_level(work)
    assert fuse_bias(work) is True
    assert _ops(work) == ["glow.fc", "clip"]
    assert fuse_activations(work) is True
    assert _ops(work) == ["glow.fc"]
    fc = next(n for n in work.nodes if n.op == "glow.fc")
    assert len(fc.inputs) == 3 and (fc.attrs["act_min"], fc.attrs["act_max"]) == (0.0, 6.0)
    assert_close(evaluate(work, [inp]), reference(module, inp))


def test_residual_add_relu_fuses():
    g = Graph()
    a, b = g.add_input("a", f32(1, 2, 3, 3)), g.add_input("b", f32(1, 2, 3, 3))
    s = g.add_node("add", [a, b], [f32(1, 2, 3, 3)]).output
    g.set_outputs([g.add_node("relu", [s], [f32(1, 2, 3, 3)]).output])
    module, x, y = module_of(g), rand(1, 2, 3, 3), rand(1, 2, 3, 3, seed=1)
    work = working_graph(module, "forward")
    assert fuse_activations(work) is True
    assert _ops(work) == ["glow.add"]
    assert_close(evaluate(work, [x, y]), reference(module, x, y))


def test_no_fusion_when_the_unactivated_value_is_also_used():
    g = Graph()
    a = g.add_input("a", f32(4))
    s = g.add_node("add", [a, a], [f32(4)]).output
    r = g.add_node("relu", [s], [f32(4)]).output
    g.set_outputs([r, s])
    work = working_graph(module_of(g), "forward")
    assert fuse_activations(work) is False
    assert fuse_bias(work) is False
    assert _ops(work) == ["add", "relu"]
