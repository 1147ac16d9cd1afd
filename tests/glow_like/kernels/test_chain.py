"""Fused element-wise chains (``glow.chain``): the pass forms them, the compiled kernel and its
numpy fallback match the reference backend over broadcasting shapes, batch 1 and > 1."""

from __future__ import annotations

import numpy as np
import pytest

from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

glow = pytest.importorskip("lowerkit_glow_like")
pytest.importorskip("numba")


def _add(g, op, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _param(g, params, name, array):
    params[name] = array
    return g.add_node("param", [], [TensorType("f32", array.shape)], {"name": name}).output


def chain_module(shape, kind, seed=0):
    """Small graphs of element-wise runs with broadcasting side inputs."""
    rng = np.random.default_rng(seed)
    g, params = Graph(), {}
    x = g.add_input("x", TensorType("f32", shape))
    c = shape[1] if len(shape) > 1 else shape[0]
    if kind == "scale_shift_relu6":  # batch norm outside a conv
        s = _param(g, params, "s", rng.standard_normal((1, c, 1, 1)).astype(np.float32))
        b = _param(g, params, "b", rng.standard_normal((1, c, 1, 1)).astype(np.float32))
        y = _add(g, "relu6", [_add(g, "add", [_add(g, "mul", [x, s]), b])])
    elif kind == "silu":  # x * sigmoid(x): x read twice, loaded once
        y = _add(g, "mul", [_add(g, "sigmoid", [x]), x])
    elif kind == "gate":  # squeeze-excitation style gate over [N, C, 1, 1], then clip
        gate = g.add_input("gate", TensorType("f32", (shape[0], c, 1, 1)))
        y = _add(g, "clip", [_add(g, "mul", [x, _add(g, "sigmoid", [gate])])], {"min": -1.0, "max": 0.5})
    elif kind == "unary_mix":  # last-dim vector, tanh, leaky, exp, neg, sub, div
        v = _param(g, params, "v", (rng.random(shape[-1]) + 0.5).astype(np.float32))
        t = _add(g, "tanh", [_add(g, "div", [x, v])])
        t = _add(g, "leaky_relu", [t], {"negative_slope": 0.2})
        y = _add(g, "sub", [_add(g, "exp", [t]), _add(g, "neg", [t])])
    else:  # residual: add, relu, then a scalar multiply
        r = g.add_input("r", TensorType("f32", shape))
        k = _param(g, params, "k", np.array([0.5], np.float32))
        y = _add(g, "mul", [_add(g, "relu", [_add(g, "add", [x, r])]), k])
    g.set_outputs([y])
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    return Module(params, {"forward": GraphMethod(g)}, name="Chain")


KINDS = ["scale_shift_relu6", "silu", "gate", "unary_mix", "residual"]
SHAPES = [(1, 3, 5, 7), (3, 4, 9, 33), (2, 5, 1, 300)]


def _inputs(module, seed):
    from lowerkit import graph_of

    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(np.float32) for v in graph_of(module).inputs]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_chain_matches_reference(kind, shape, threads, monkeypatch):
    from lowerkit_glow_like.kernels import chain

    monkeypatch.setattr(chain, "PARALLEL_MIN_ELEMENTS", 0)
    module = chain_module(shape, kind)
    inputs = _inputs(module, 1)
    expected = module.run("forward", *inputs)
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": {"threads": threads}})
    handle = glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]
    ops = [ins.op for ins in handle.program.instructions]
    assert "glow.chain" in ops, ops
    (got,) = glow.lowerkit_execute(handle=handle, inputs=inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_numpy_fallback_runs_the_same_program():
    from lowerkit_glow_like.kernels.chain import prepare_chain

    module = chain_module((2, 3, 4, 5), "scale_shift_relu6")
    payload = glow.lowerkit_preprocess(module=module, compile_spec={})
    handle = glow.lowerkit_compile(processed=payload, compile_spec={})["forward"]
    (ins,) = [i for i in handle.program.instructions if i.op == "glow.chain"]
    x = _inputs(module, 2)[0]
    arrays = [x] + [handle.constants[handle.program.buffers[b].constant].reshape(handle.program.buffers[b].shape)
                    for b in ins.inputs[1:]]
    out = np.empty_like(x)
    prepare_chain(arrays, [out], ins.attrs, None)()  # no scratch: the numpy interpreter
    np.testing.assert_allclose(out, module.run("forward", x), rtol=1e-6, atol=1e-6)


def test_compress_merges_contiguous_dimensions():
    from lowerkit_glow_like.kernels.chain import broadcast_strides, compress

    out = (2, 3, 4, 5)
    shape, strides = compress(out, [broadcast_strides(out, out), broadcast_strides(out, out)])
    assert shape == [120] and strides == [[1], [1]]  # fully contiguous: one linear loop
    shape, strides = compress(out, [broadcast_strides(out, out), broadcast_strides((1, 3, 1, 1), out)])
    assert shape == [2, 3, 20] and strides[1] == [0, 1, 0]


def test_no_chain_for_a_single_op_or_a_shared_intermediate():
    from lowerkit.ir import Graph as G
    from lowerkit_glow_like.passes.fuse_chains import fuse_elementwise_chains

    g = G()
    x = g.add_input("x", TensorType("f32", (2, 3)))
    a = _add(g, "relu", [x])
    b = _add(g, "exp", [a])
    c = _add(g, "neg", [a])  # a has two readers: the chain cannot swallow it
    g.set_outputs([b, c])
    assert not fuse_elementwise_chains(g)
