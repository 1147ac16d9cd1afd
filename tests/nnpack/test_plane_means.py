"""A squeeze-excitation pool of a depthwise layer, computed by the layer's step: the plan's
depthwise step returns the map and its planes' means (the kernels write each mean while the
plane is in cache; glow_like's ``fuse_plane_means`` uses the same kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.nnpack.test_team import _add, _param_maker, _plan

import lowerkit as lk
from lowerkit.backend.cpu.team import team_off
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

pytest.importorskip("numba")


def _squeeze_excite(batch, channels, side, stride, kernel=3):
    """depthwise k x k + silu -> pool -> 1x1 + relu -> 1x1 + sigmoid = gate; 1x1(map * gate)."""
    g, params = Graph(), {}
    param = _param_maker(g, params, 3)
    x = g.add_input("x", TensorType("f32", (batch, channels, side, side)))
    pad = (kernel // 2,) * 4
    y = _add(g, "silu", [_add(g, "conv2d", [x, param("dw", (channels, 1, kernel, kernel)), param("dw_b", (channels,))],
                              {"padding": pad, "stride": (stride, stride), "groups": channels})])
    s = _add(g, "global_avg_pool2d", [y])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("se1", (4, channels, 1, 1)), param("se1_b", (4,))])])
    s = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("se2", (channels, 4, 1, 1)), param("se2_b", (channels,))])])
    g.set_outputs([_add(g, "conv2d", [_add(g, "mul", [y, s]), param("project", (8, channels, 1, 1))])])
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
        node.attrs = get_schema(node.op).normalize_attrs(node.attrs)
    return Module(params, {"forward": GraphMethod(g)}, name="SqueezeExcite")


# channels, side, stride -> the depthwise kernel: blocked (14x14 and under), flat, phases
GEOMETRIES = {"depthwise_blocked": (20, 12, 1), "depthwise3x3_same": (16, 20, 1), "depthwise3x3_s2": (16, 32, 2),
              "team-sized": (64, 28, 1)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_the_depthwise_step_computes_its_pool(geometry, batch, threads):
    channels, side, stride = GEOMETRIES[geometry]
    module = _squeeze_excite(batch, channels, side, stride)
    x = np.random.default_rng(4).standard_normal((batch, channels, side, side)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": threads}})
    plan = _plan(lowered)
    assert not any(step.node.op == "global_avg_pool2d" for step in plan.steps)
    (dw,) = [step for step in plan.steps if len(step.outputs) == 2]
    assert dw.node.op == "conv2d" and dw.node.attrs["groups"] == channels
    expected = module(x)
    scale = max(1.0, float(np.abs(expected).max()))
    for _ in range(3):  # the second call binds the step's arrays, the third runs the bound call
        np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * scale)
    with team_off():  # the layer's serial form (as a slice of a batch on a worker runs it)
        (serial,) = plan._run([x])
    np.testing.assert_allclose(serial, expected, rtol=0, atol=1e-4 * scale)


def test_the_switch_keeps_the_pool_step(monkeypatch):
    monkeypatch.setenv("LOWERKIT_PLANE_MEANS", "0")
    module = _squeeze_excite(1, 16, 20, 1)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    assert any(step.node.op == "global_avg_pool2d" for step in _plan(lowered).steps)
    x = np.random.default_rng(6).standard_normal((1, 16, 20, 20)).astype(np.float32)
    expected = module(x)
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_a_depthwise_kernel_without_means_keeps_the_pool_step():
    module = _squeeze_excite(1, 16, 20, 1, kernel=4)  # an even kernel: the channels-last one
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    assert any(step.node.op == "global_avg_pool2d" for step in _plan(lowered).steps)
    x = np.random.default_rng(5).standard_normal((1, 16, 20, 20)).astype(np.float32)
    assert "depthwise (depthwise_cl)" in _plan(lowered).algorithms.values()
    expected = module(x)
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_the_layer_computes_means_on_every_path():
    """``DepthwiseConv2d.run_into(..., means=)`` on a non-contiguous input and a contiguous one,
    on one thread and in the pool's bands, and with the channels-last kernel (a pass after it):
    each plane's mean of the output it wrote."""
    from lowerkit_nnpack.conv import RunOptions
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.geometry import ConvGeometry

    rng = np.random.default_rng(8)
    for kernel, workers in ((3, 1), (3, 2), (4, 2)):  # a 4x4 kernel: the channels-last one
        padding = (1, 1, 1, 1) if kernel == 3 else (2, 2, 1, 1)
        geom = ConvGeometry(in_channels=24, out_channels=24, in_hw=(40, 40), kernel=(kernel, kernel), padding=padding)
        conv = DepthwiseConv2d(geom, rng.standard_normal((24, 1, kernel, kernel)).astype(np.float32), None,
                               options=RunOptions(threads=workers, min_parallel_flops=0), team=False)
        x = rng.standard_normal((2, 24, 40, 80)).astype(np.float32)[:, :, :, ::2]  # not contiguous
        out, means = np.empty((2, 24, 40, 40), np.float32), np.full((2, 24, 1, 1), np.nan, np.float32)
        conv.run_into(x, out, None, means)
        np.testing.assert_allclose(means, out.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
        conv.run_into(np.ascontiguousarray(x), out, None, means)  # straight to the kernels
        np.testing.assert_allclose(means, out.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
