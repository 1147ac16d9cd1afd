"""fold_gates: conv1x1(x * gate[N, C, 1, 1]) -> glow.gated_conv2d, the squeeze-excitation
product folded into the weight per image — where the weight is the cheaper side."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, f32, module_of, rand, reference, run_glow

from lowerkit.ir import Graph, TensorType
from lowerkit.opset import ShapeError, get_schema
from lowerkit_glow_like._compiler import compile_method
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like._options import Options
from lowerkit_glow_like.lir.batch import batch_sliceable
from lowerkit_glow_like.passes import fold_gates, fuse_activations, fuse_bias
from lowerkit_glow_like.payload.validate import check_instruction


def _add(g: Graph, op: str, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _se_block(n=2, c=8, hw=6, oc=4, *, conv_kernel=1, extra_reader=False):
    """x -> global pool -> 1x1 conv + relu -> 1x1 conv -> sigmoid = gate; conv(x * gate, W) + b."""
    g, params = Graph(), {}
    rng = np.random.default_rng(3)

    def param(name, shape):
        params[name] = rng.standard_normal(shape).astype(np.float32) * 0.5
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    x = g.add_input("x", f32(n, c, hw, hw))
    s = _add(g, "global_avg_pool2d", [x])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("w1", (2, c, 1, 1)), param("b1", (2,))])])
    gate = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("w2", (c, 2, 1, 1)), param("b2", (c,))])])
    y = _add(g, "mul", [x, gate])
    pad = (conv_kernel // 2,) * 4
    out = _add(g, "conv2d", [y, param("w3", (oc, c, conv_kernel, conv_kernel)), param("b3", (oc,))],
               {"padding": pad})
    g.set_outputs([out, y] if extra_reader else [out])
    return module_of(g, params)


def _ops(graph):
    return [node.op for node in graph.nodes if node.op != "constant"]


def _optimized(module):
    work = working_graph(module, "forward")
    fuse_bias(work)
    fuse_activations(work)
    return work


def test_gate_folds_into_the_pointwise_convolution():
    module, x = _se_block(), rand(2, 8, 6, 6)
    work = _optimized(module)
    assert fold_gates(work) is True
    assert "mul" not in _ops(work) and _ops(work)[-1] == "glow.gated_conv2d"
    assert_close(evaluate(work, [x]), reference(module, x))


@pytest.mark.parametrize("case", ["weight-larger-than-the-map", "3x3-convolution", "product-read-elsewhere"])
def test_gate_stays_a_product(case):
    if case == "weight-larger-than-the-map":
        module = _se_block(oc=36)  # OC >= H*W: scaling the weight would cost more
    elif case == "3x3-convolution":
        module = _se_block(conv_kernel=3)
    else:
        module = _se_block(extra_reader=True)
    work = _optimized(module)
    assert fold_gates(work) is False
    assert "mul" in _ops(work)


@pytest.mark.parametrize("threads", [1, 2])
def test_gated_programs_match_the_reference(threads):
    module, x = _se_block(n=3), rand(3, 8, 6, 6, seed=4)
    program = compile_method(module, "forward", Options(threads=threads))
    assert [ins.op for ins in program.instructions].count("glow.gated_conv2d") == 1
    assert batch_sliceable(program)  # the gate is per sample, like the input
    assert_close(run_glow(module, x, threads=threads), reference(module, x))


def _t(*shape, dtype="f32"):
    return TensorType(dtype, shape)


@pytest.mark.parametrize("inputs, error", [
    ([_t(2, 8, 6, 6), _t(4, 8, 1, 1), _t(4), _t(2, 8, 1, 2)], "gate must be"),
    ([_t(2, 8, 6, 6), _t(4, 8, 1, 1), _t(4), _t(1, 8, 1, 1)], "gate must be"),
    ([_t(2, 8, 6, 6), _t(4, 8, 1, 1), _t(4)], "takes 4 inputs"),
])
def test_payload_validation_refuses_bad_gated_instructions(inputs, error):
    attrs = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
    with pytest.raises(ShapeError, match=error):
        check_instruction("glow.gated_conv2d", inputs, attrs, [_t(2, 4, 6, 6)])


def test_payload_validation_refuses_a_gated_3x3():
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    inputs = [_t(2, 8, 6, 6), _t(4, 8, 3, 3), _t(4), _t(2, 8, 1, 1)]
    with pytest.raises(ShapeError, match="1x1"):
        check_instruction("glow.gated_conv2d", inputs, attrs, [_t(2, 4, 6, 6)])


def _gated_block(n, c, hw, oc, seed, residual):
    """x -> SE gate -> conv1x1(x * gate) then hardswish, or (``residual``) + a 1x1 projection of
    x, then relu: glow.gated_conv2d with a fused activation, or with a fused residual add."""
    g, params = Graph(), {}
    rng = np.random.default_rng(seed)

    def param(name, shape):
        params[name] = rng.standard_normal(shape).astype(np.float32) * 0.3
        return g.add_node("param", [], [f32(*shape)], {"name": name}).output

    x = g.add_input("x", f32(n, c, hw, hw))
    s = _add(g, "global_avg_pool2d", [x])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("w1", (4, c, 1, 1)), param("b1", (4,))])])
    gate = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("w2", (c, 4, 1, 1)), param("b2", (c,))])])
    # the projection first: of two convolutions feeding an add, the later one takes the sum
    skip = _add(g, "conv2d", [x, param("w4", (oc, c, 1, 1))]) if residual else None
    y = _add(g, "conv2d", [_add(g, "mul", [x, gate]), param("w3", (oc, c, 1, 1)), param("b3", (oc,))])
    if residual:
        g.set_outputs([_add(g, "relu", [_add(g, "add", [skip, y])])])
    else:
        g.set_outputs([_add(g, "hardswish", [y])])
    return module_of(g, params)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("c, hw, oc", [(16, 7, 5), (100, 14, 40), (300, 7, 13), (24, 15, 70)])
def test_one_thread_runs_gated_layers_on_the_panel_gemm(monkeypatch, c, hw, oc, residual):
    """On one thread (a batch slice's form) a gated layer the panel GEMM takes scales a copy of
    the packed weight per image (PackedWeight.bind_gated_images), bias and activation in its
    tiles (a fused residual add and its activation after it); the reference's values."""
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "fits", lambda k, pixels, team: not team)
    bound = []
    real = panels.PackedWeight.bind_gated_images
    monkeypatch.setattr(panels.PackedWeight, "bind_gated_images",
                        lambda self, *a, **k: bound.append(self.k) or real(self, *a, **k))
    module = _gated_block(3, c, hw, oc, seed=c, residual=residual)
    program = compile_method(module, "forward", Options(threads=1))
    (gated,) = [ins for ins in program.instructions if ins.op == "glow.gated_conv2d"]
    assert bool(gated.attrs.get("residual")) is residual
    x = rand(3, c, hw, hw, seed=5)
    assert_close(run_glow(module, x, threads=1), reference(module, x), rtol=1e-5)
    assert bound and set(bound) == {c}
