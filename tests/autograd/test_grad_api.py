"""lowerkit.autograd.grad: the method it adds, wrt handling, errors, and that the backward
graph is an ordinary graph (prints, parses, verifies, saves, loads, lowers)."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from lowerkit.ir import Graph, GraphMethod, Module, TensorType, format_graph, graphs_equal, parse_graph, verify_module

pytest.importorskip("lowerkit_reference")


@pytest.fixture(scope="module")
def cnn():
    x = np.random.default_rng(0).random((2, 3, 8, 8), dtype=np.float32)
    return lk.trace(models.small_cnn(), x), x


def _numeric_grad(module: Module, x: np.ndarray, cot: np.ndarray, name: str, index: tuple) -> float:
    h = 1e-2
    params = {k: np.array(v, np.float64) for k, v in module.parameters.items()}

    def loss(step):
        moved = dict(params)
        moved[name] = params[name].copy()
        moved[name][index] += step
        m = Module({k: v.astype(np.float32) for k, v in moved.items()}, module.methods, name=module.name)
        return float((m(x).astype(np.float64) * cot).sum())

    return (loss(h) - loss(-h)) / (2 * h)


def test_signature_and_order(cnn):
    module, x = cnn
    gm = lk.autograd.grad(module)
    sig = gm.signature("forward_grad")
    assert [n for n, _ in sig.inputs] == ["x", "grad_fc"]
    assert sig.inputs[1][1] == module.signature("forward").outputs[0]
    assert sig.outputs == module.signature("forward").outputs + tuple(
        TensorType.of(a) for a in module.parameters.values())
    assert set(gm.methods) == {"forward", "forward_grad"}
    assert gm.parameters.keys() == module.parameters.keys()


def test_outputs_and_a_gradient_against_finite_differences(cnn):
    module, x = cnn
    gm = lk.autograd.grad(module, wrt=["conv.weight", "x"])
    cot = np.random.default_rng(1).standard_normal((2, 10)).astype(np.float32)
    out, dw, dx = gm.run("forward_grad", x, cot)
    np.testing.assert_array_equal(out, module(x))
    assert dx.shape == x.shape and dw.shape == module.parameters["conv.weight"].shape
    numeric = _numeric_grad(module, x, cot, "conv.weight", (3, 1, 2, 0))
    assert abs(numeric - dw[3, 1, 2, 0]) < 2e-3 * max(1, abs(numeric))


def test_unused_parameter_gets_zeros():
    g = Graph()
    x = g.add_input("x", TensorType("f32", (3,)))
    w = g.add_node("param", [], [TensorType("f32", (3,))], {"name": "w"}, debug_handle=0).output
    y = g.add_node("mul", [x, w], [TensorType("f32", (3,))], debug_handle=1).output
    g.set_outputs([y])
    module = Module({"w": np.arange(3, dtype=np.float32), "unused": np.ones((2, 2), np.float32)},
                    {"forward": GraphMethod(g)})
    gm = lk.autograd.grad(module)
    _, dw, du = gm.run("forward_grad", np.full(3, 2, np.float32), np.ones(3, np.float32))
    np.testing.assert_array_equal(dw, np.full(3, 2, np.float32))
    np.testing.assert_array_equal(du, np.zeros((2, 2), np.float32))


def test_calls_of_own_methods_are_inlined():
    def inner(x):
        return lk.ops.relu(lk.ops.mul(x, x))

    g = Graph()
    x = g.add_input("x", TensorType("f32", (4,)))
    sq = g.add_node("mul", [x, x], [x.type], debug_handle=0).output
    r = g.add_node("relu", [sq], [x.type], debug_handle=1).output
    g.set_outputs([r])
    outer = Graph()
    xo = outer.add_input("x", TensorType("f32", (4,)))
    c = outer.add_node("call", [xo], [xo.type], {"method": "inner", "module": ""}, debug_handle=2).output
    e = outer.add_node("exp", [c], [xo.type], debug_handle=3).output
    outer.set_outputs([e])
    module = Module(methods={"inner": GraphMethod(g), "forward": GraphMethod(outer)})
    gm = lk.autograd.grad(module, wrt=["x"])
    xv = np.array([0.5, -1.0, 2.0, 0.1], np.float32)
    _, dx = gm.run("forward_grad", xv, np.ones(4, np.float32))
    np.testing.assert_allclose(dx, np.exp(xv * xv) * 2 * xv, rtol=1e-5)
    assert "call" not in {n.op for n in lk.graph_of(gm, "forward_grad").nodes}
    del inner


def test_backward_graph_is_an_ordinary_graph(cnn, tmp_path):
    module, x = cnn
    gm = lk.autograd.grad(module, wrt=["conv.weight", "fc.bias"])
    verify_module(gm)
    text = format_graph(lk.graph_of(gm, "forward_grad"), "forward_grad")
    assert "conv2d_weight_grad(" in text and "max_pool2d_grad(" in text
    _, parsed, returns_tuple = parse_graph(text)
    assert returns_tuple and graphs_equal(parsed, lk.graph_of(gm, "forward_grad"))
    path = tmp_path / "grad.lkm"
    lk.save(gm, path)
    cot = np.ones((2, 10), np.float32)
    want = gm.run("forward_grad", x, cot)
    for got, expected in zip(lk.load(path).run("forward_grad", x, cot), want):
        np.testing.assert_array_equal(got, expected)
    lowered = lk.to_backend(gm, "glow_like")
    for got, expected in zip(lowered.run("forward_grad", x, cot), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_errors_name_what_was_expected(cnn):
    module, _ = cnn
    with pytest.raises(lk.InputError, match=r"wrt names \['nope'\] that are neither parameters of .* nor inputs"):
        lk.autograd.grad(module, wrt=["nope"])
    with pytest.raises(lk.InputError, match=r"wrt must be a list of parameter and/or input names, got 'x'"):
        lk.autograd.grad(module, wrt="x")
    with pytest.raises(lk.InputError, match=r"has no method 'backward' to take a graph of"):
        lk.autograd.grad(module, method="backward")
    with pytest.raises(lk.InputError, match=r"already has a method 'forward_grad'"):
        lk.autograd.grad(lk.autograd.grad(module))
    with pytest.raises(lk.InputError, match=r"expects a lowerkit.Module, got SmallCNN"):
        lk.autograd.grad(models.small_cnn())


def test_trainer_is_installed_from_the_training_floor():
    from lowerkit.training import Trainer

    assert lk.autograd.Trainer is Trainer


def test_entries_name_the_ops_inputs():
    from lowerkit.autograd import DERIVATIVES, derivative

    with pytest.raises(ValueError, match=r"derivative entry of 'hardswish_grad' names inputs \['y'\] "
                       r"\(unknown: \['y'\]\); the op's inputs are \['x', 'grad'\]"):
        derivative("hardswish_grad", y=lambda d: d.grad)
    with pytest.raises(ValueError, match=r"op 'relu' has two derivative entries"):
        derivative("relu", x=lambda d: d.grad)
    assert "hardswish_grad" not in DERIVATIVES
