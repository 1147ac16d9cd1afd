"""What nnpack claims in a partition since it fuses activations and residual adds into its
convolutions, and the regions that gives on ResNet and mobile-network blocks (no timings)."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

nnpack = pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("numba")

from lowerkit_nnpack import lowerkit_is_supported  # noqa: E402
from lowerkit_nnpack.support import support_reason  # noqa: E402


class Builder:
    """A tiny graph builder with parameters and debug handles."""

    def __init__(self, x_shape, seed=0):
        self.g = Graph()
        self.params: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)
        self.x = self.g.add_input("x", TensorType("f32", x_shape))

    def op(self, op, ins, attrs=None):
        schema = get_schema(op)
        full = schema.normalize_attrs(attrs or {})
        (t,) = schema.infer([v.type for v in ins], full)
        return self.g.add_node(op, ins, [t], full).output

    def param(self, shape):
        name = f"p{len(self.params)}"
        self.params[name] = (self.rng.standard_normal(shape) / np.sqrt(max(1, np.prod(shape[1:])))).astype(np.float32)
        return self.g.add_node("param", [], [TensorType("f32", shape)], {"name": name}).output

    def conv(self, x, oc, k=1, stride=1, groups=1):
        c = x.type.shape[1]
        p = k // 2
        return self.op("conv2d", [x, self.param((oc, c // groups, k, k)), self.param((oc,))],
                       {"stride": (stride, stride), "padding": (p, p, p, p), "groups": groups})

    def module(self, out):
        self.g.set_outputs([out])
        for i, node in enumerate(self.g.nodes):
            node.debug_handle = i + 1
        return Module(self.params, {"forward": GraphMethod(self.g)}, name="Block")


def _node(op, shape, attrs=None):
    b = Builder(shape)
    b.op(op, [b.x], attrs)
    return b.g.nodes[-1]


@pytest.mark.parametrize("op", ["relu", "relu6", "clip", "hardswish", "hardsigmoid", "silu", "gelu"])
def test_activations_on_feature_maps_are_claimed(op):
    assert lowerkit_is_supported(_node(op, (2, 8, 5, 5)), None) is True
    assert lowerkit_is_supported(_node(op, (2, 8)), None) is True  # after a fully-connected layer


@pytest.mark.parametrize("op", ["relu", "silu", "sigmoid"])
def test_activations_on_pooled_vectors_are_claimed(op):
    """A squeeze-excitation gate's activations stay in nnpack's region (global pooling and
    the gate's multiply are nnpack's too)."""
    assert lowerkit_is_supported(_node(op, (1, 8, 1, 1)), None) is True


def test_convolution_on_a_1x1_plane_is_claimed():
    b = Builder((1, 16, 1, 1))
    b.conv(b.x, 4)
    node = next(n for n in b.g.nodes if n.op == "conv2d")
    assert lowerkit_is_supported(node, None) is True


def test_mul_of_a_map_by_anything_but_a_channel_gate_or_its_shape_is_declined():
    b = Builder((1, 8, 4, 4))
    gate = b.g.add_input("g", TensorType("f32", (1, 1, 4, 4)))
    node = b.g.add_node("mul", [b.x, gate], [TensorType("f32", (1, 8, 4, 4))])
    answer = lowerkit_is_supported(node, None)
    assert not answer and "per-channel gate" in answer.reason


def test_whole_module_lowering_still_runs_pooled_vector_nodes():
    b = Builder((2, 16, 1, 1))
    module = b.module(b.op("relu6", [b.conv(b.x, 4)]))
    x = np.random.default_rng(0).standard_normal((2, 16, 1, 1)).astype(np.float32)
    np.testing.assert_allclose(lk.to_backend(module, "nnpack")(x), module(x), rtol=1e-5, atol=1e-6)


def _regions(lowered):
    return [(r.backend, tuple(r.ops)) for r in lowered.partition_report().regions]


def test_inverted_residual_block_is_one_nnpack_region():
    """conv-relu6-depthwise-relu6-conv + residual: the activations and the residual add
    fuse into nnpack's convolutions, so the block is one region (it was 6 before)."""
    b = Builder((1, 8, 12, 12))
    y = b.op("relu6", [b.conv(b.x, 24)])
    y = b.op("relu6", [b.conv(y, 24, k=3, groups=24)])
    y = b.conv(y, 8)
    module = b.module(b.op("add", [y, b.x]))
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert _regions(lowered) == [("nnpack", ("conv2d", "relu6", "conv2d", "relu6", "conv2d", "add"))]
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)


def _basic_block(builder, downsample):
    """ResNet's basic block in trace order: conv1, relu, conv2, (downsample conv), add, relu."""
    b = builder
    y = b.op("relu", [b.conv(b.x, 8, k=3)])
    y = b.conv(y, 8, k=3)
    identity = b.conv(b.x, 8) if downsample else b.x
    return b.module(b.op("relu", [b.op("add", [y, identity])]))


@pytest.mark.parametrize("downsample", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_residual_add_and_relu_fuse_into_a_convolution(downsample, batch):
    from lowerkit_nnpack.plan import Plan

    b = Builder((batch, 4 if downsample else 8, 9, 11), seed=batch)
    module = _basic_block(b, downsample)
    plan = Plan(module.methods["forward"].graph, module.parameters, dict(nnpack.DEFAULTS))
    # conv1+relu, conv2 (+add+relu unless the downsample conv, computed later, takes them)
    ops = [s.node.op for s in plan.steps]
    assert ops == ["conv2d"] * (3 if downsample else 2)
    x = np.random.default_rng(batch).standard_normal(b.x.type.shape).astype(np.float32)
    for backends in ("nnpack", ["nnpack", "glow_like"]):
        lowered = lk.to_backend(module, backends)
        np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)


def test_add_is_claimed_for_operands_of_one_shape_only():
    b = Builder((2, 8, 5, 5))
    b.op("add", [b.x, b.x])
    assert lowerkit_is_supported(b.g.nodes[-1], None) is True
    c = Builder((2, 8, 5, 5))
    c.op("add", [c.x, c.param((8, 1, 1))])
    answer = lowerkit_is_supported(c.g.nodes[-1], None)
    assert not answer and "no broadcasting" in answer.reason


def test_unfused_add_runs_alone():
    b = Builder((2, 3, 4, 5))
    module = b.module(b.op("add", [b.x, b.op("relu", [b.x])]))  # relu reads an input: nothing to fuse
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(lk.to_backend(module, "nnpack")(x), module(x))


def test_squeeze_excitation_block_is_one_nnpack_region():
    """conv-silu, then global pool, two convolutions on the pooled vector, sigmoid and the
    multiply: nnpack runs the whole block (a region boundary at every gate made
    EfficientNet-B0 35 regions)."""
    b = Builder((1, 8, 10, 10))
    y = b.op("silu", [b.conv(b.x, 16, k=3)])
    s = b.op("global_avg_pool2d", [y])
    s = b.op("silu", [b.conv(s, 4)])
    s = b.op("sigmoid", [b.conv(s, 16)])
    module = b.module(b.op("mul", [y, s]))
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert _regions(lowered) == [
        ("nnpack", ("conv2d", "silu", "global_avg_pool2d", "conv2d", "silu", "conv2d", "sigmoid", "mul")),
    ]
    x = np.random.default_rng(2).standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)


def _plan(lowered):
    from lowerkit_nnpack.plan import Plan

    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    return plan


@pytest.mark.parametrize("batch", [1, 3])
def test_pooled_vector_convolutions_run_as_matrix_products(monkeypatch, batch):
    """The two 1x1 convolutions of a squeeze-excitation gate read [N, C, 1, 1]: they run as
    one matrix product each on the compiled panel GEMM with bias and activation in the same
    pass — every image in one call where there are several — and match the reference, bound
    (from the third call) or not."""
    from lowerkit.backend.cpu import panels

    on_panels = []  # (rows, images, columns) of each panel GEMM (the 3x3 layer's may take it too)
    real, real_images = panels.PackedWeight.run, panels.PackedWeight.run_images
    monkeypatch.setattr(panels.PackedWeight, "run",
                        lambda self, x, *a: on_panels.append((self.m, 1, x.shape[1])) or real(self, x, *a))
    monkeypatch.setattr(panels.PackedWeight, "run_images",
                        lambda self, x, *a: on_panels.append((self.m, *x.shape[::2])) or real_images(self, x, *a))
    b = Builder((batch, 8, 6, 6), seed=4)
    y = b.op("relu", [b.conv(b.x, 12, k=3)])
    s = b.op("global_avg_pool2d", [y])
    s = b.op("silu", [b.conv(s, 5)])
    s = b.op("sigmoid", [b.conv(s, 12)])
    module = b.module(b.op("mul", [y, s]))
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 1}})
    assert sorted(_plan(lowered).algorithms.values()).count("pooled_pointwise") == 2
    x = np.random.default_rng(5).standard_normal((batch, 8, 6, 6)).astype(np.float32)
    first = np.asarray(lowered(x))
    np.testing.assert_allclose(first, module(x), rtol=1e-4, atol=1e-5)
    assert [call for call in on_panels if call[2] == 1] == [(5, batch, 1), (12, batch, 1)]
    for _ in range(3):  # recorded, bound, then replayed: the same bits
        np.testing.assert_array_equal(np.asarray(lowered(x)), first)


def test_flatten_is_claimed_and_stays_in_the_region():
    b = Builder((2, 6, 4, 4), seed=6)
    pooled = b.op("global_avg_pool2d", [b.op("relu", [b.conv(b.x, 6, k=3)])])
    flat = b.op("flatten", [pooled], {"start_dim": 1})
    assert lowerkit_is_supported(b.g.nodes[-1], None) is True
    module = b.module(flat)
    lowered = lk.to_backend(module, ["nnpack", "glow_like"])
    assert _regions(lowered) == [("nnpack", ("conv2d", "relu", "global_avg_pool2d", "flatten"))]
    x = np.random.default_rng(7).standard_normal((2, 6, 4, 4)).astype(np.float32)
    out = lowered(x)
    assert out.shape == (2, 6)
    np.testing.assert_allclose(out, module(x), rtol=1e-4, atol=1e-5)
