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


def _mixed_silu_graph(also_read: bool = False) -> tuple[Graph, dict]:
    """Two depthwise convolutions (3x3 on 2 channels, 5x5 on 3) concatenated over channels,
    then SiLU (MixNet's mixed kernels); ``also_read``: the first one's output is an output too."""
    g = Graph()
    a, b = g.add_input("a", f32(1, 2, 6, 6)), g.add_input("b", f32(1, 3, 6, 6))
    wa = g.add_node("param", [], [f32(2, 1, 3, 3)], {"name": "wa"}).output
    wb = g.add_node("param", [], [f32(3, 1, 5, 5)], {"name": "wb"}).output
    ya = g.add_node("conv2d", [a, wa], [f32(1, 2, 6, 6)], {"padding": (1, 1, 1, 1), "groups": 2}).output
    yb = g.add_node("conv2d", [b, wb], [f32(1, 3, 6, 6)], {"padding": (2, 2, 2, 2), "groups": 3}).output
    y = g.add_node("concat", [ya, yb], [f32(1, 5, 6, 6)], {"dim": 1}).output
    z = g.add_node("silu", [y], [f32(1, 5, 6, 6)]).output
    g.set_outputs([z, ya] if also_read else [z])
    return g, {"wa": rand(2, 1, 3, 3, seed=1), "wb": rand(3, 1, 5, 5, seed=2)}


def test_an_activation_of_a_concatenation_goes_into_each_part():
    graph, params = _mixed_silu_graph()
    module, inputs = module_of(graph, params), (rand(1, 2, 6, 6, seed=3), rand(1, 3, 6, 6, seed=4))
    work = working_graph(module, "forward")
    assert fuse_activations(work) is True
    assert _ops(work) == ["glow.conv2d", "glow.conv2d", "concat"]
    assert all(n.attrs["act"] == "silu" for n in work.nodes if n.op == "glow.conv2d")
    assert next(n for n in work.nodes if n.op == "concat").output is work.outputs[0]
    assert_close(evaluate(work, list(inputs)), reference(module, *inputs))


def test_no_fusion_through_a_concatenation_whose_part_is_read_elsewhere():
    graph, params = _mixed_silu_graph(also_read=True)
    work = working_graph(module_of(graph, params), "forward")
    fuse_activations(work)
    assert "silu" in _ops(work) and all(n.attrs.get("act", "none") == "none" for n in work.nodes if "conv" in n.op)
