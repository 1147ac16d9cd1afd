"""nnpack's depthwise extension (NNPACK has none) against the reference backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

nnpack = pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("numba")


def _add(g, op, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def depthwise_module(x_shape, k, stride, padding, *, bias=True, relu=True, seed=0):
    rng = np.random.default_rng(seed)
    c = x_shape[1]
    g = Graph()
    x = g.add_input("x", TensorType("f32", x_shape))
    params = {"w": rng.standard_normal((c, 1, k, k)).astype(np.float32)}
    ins = [x, g.add_node("param", [], [TensorType("f32", (c, 1, k, k))], {"name": "w"}).output]
    if bias:
        params["b"] = rng.standard_normal(c).astype(np.float32)
        ins.append(g.add_node("param", [], [TensorType("f32", (c,))], {"name": "b"}).output)
    y = _add(g, "conv2d", ins, {"stride": stride, "padding": padding, "groups": c})
    if relu:
        y = _add(g, "relu", [y])
    g.set_outputs([y])
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    return Module(params, {"forward": GraphMethod(g)}, name="Depthwise")


CASES = [
    ((1, 16, 7, 7), 3, (1, 1), (1, 1, 1, 1)),  # flat passes (3x3, stride 1, padding 1)
    ((3, 5, 15, 9), 5, (2, 2), (2, 2, 2, 2)),  # 5x5 phases, batch, stride 2, odd sides
    ((1, 7, 13, 10), 5, (1, 1), (2, 1, 2, 3)),  # 5x5 padded plane, stride 1, uneven padding
    ((2, 3, 9, 8), 7, (1, 1), (3, 3, 3, 3)),  # channels-last, 7x7
    ((1, 4, 37, 35), 3, (1, 1), (1, 1, 1, 1)),  # flat passes, odd plane
    ((2, 6, 8, 8), 3, (1, 1), (0, 0, 0, 0)),  # channels-last, 3x3 unpadded
    ((1, 4, 37, 35), 3, (2, 2), (1, 1, 1, 1)),  # rows, stride 2
    ((2, 6, 14, 12), 3, (2, 2), (1, 1, 1, 1)),  # the phases of each plane, stride 2
    ((2, 3, 41, 40), 3, (2, 2), (0, 1, 1, 0)),  # rows, stride 2, uneven padding
    ((1, 2, 36, 34), 3, (2, 1), (1, 1, 1, 1)),  # generic direct kernel (unequal strides)
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_depthwise_matches_reference(case, threads):
    x_shape, k, stride, padding = CASES[case]
    module = depthwise_module(x_shape, k, stride, padding, bias=case % 2 == 0, relu=case % 3 != 1, seed=case)
    x = np.random.default_rng(case).standard_normal(x_shape).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": threads}})
    got = lowered(x)
    expected = module(x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_depthwise_is_claimed_but_other_groups_are_not():
    module = depthwise_module((1, 4, 8, 8), 3, (1, 1), (1, 1, 1, 1))
    conv = next(n for n in lk.graph_of(module).nodes if n.op == "conv2d")
    assert nnpack.lowerkit_is_supported(node=conv, graph=None) is True
    g = Graph()
    x = g.add_input("x", TensorType("f32", (1, 4, 8, 8)))
    w = g.add_node("param", [], [TensorType("f32", (4, 2, 3, 3))], {"name": "w"}).output
    _add(g, "conv2d", [x, w], {"groups": 2})
    grouped = next(n for n in g.nodes if n.op == "conv2d")
    assert "groups=2" in str(nnpack.lowerkit_is_supported(node=grouped, graph=None).reason)


def test_depthwise_from_eight_threads():
    module = depthwise_module((2, 8, 12, 12), 3, (1, 1), (1, 1, 1, 1))
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 8, 12, 12)).astype(np.float32) for _ in range(8)]
    expected = [module(x) for x in xs]
    errors = []

    def work(i):
        for _ in range(5):
            if not np.allclose(lowered(xs[i]), expected[i], atol=1e-4):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []


@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("case", [0, 1, 3, 5, 7])
def test_run_into_matches_the_checked_call(case, with_residual):
    """A plan's bound call (``DepthwiseConv2d.run_into``, no checks) writes what the checked
    call returns, on every kernel family: flat passes, blocked, channels-last, phases."""
    from lowerkit_nnpack.conv import RunOptions
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.geometry import ConvGeometry

    x_shape, k, stride, padding = CASES[case]
    rng = np.random.default_rng(case)
    n, c = x_shape[:2]
    geom = ConvGeometry(c, c, x_shape[2:], (k, k), stride, padding)
    conv = DepthwiseConv2d(geom, rng.standard_normal((c, 1, k, k)).astype(np.float32),
                           rng.standard_normal(c).astype(np.float32), options=RunOptions(1),
                           activation=(2, 0.0, 6.0))
    x = rng.standard_normal(x_shape).astype(np.float32)
    residual = rng.standard_normal(conv.output_shape(n)).astype(np.float32) if with_residual else None
    want = conv(x, residual=residual)
    out = np.full(conv.output_shape(n), np.nan, np.float32)
    assert conv.run_into(x, out, residual) is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("case", [0, 1, 2, 4, 7])
def test_the_kernel_api_runs_a_team_region_with_the_serial_bits(monkeypatch, case, with_residual):
    """With two workers the kernel API runs a layer of the team's algorithms as one team
    region (bands of planes) where team kernels run here: the same bits as one thread; while
    its stall guard holds the team off, the pool's path; plans' layers have no team."""
    from tests.team_calls import record_team_calls, skip_without_team

    from lowerkit.backend.cpu import team_layers
    from lowerkit_nnpack.conv import RunOptions
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.geometry import ConvGeometry

    skip_without_team()
    monkeypatch.setattr(team_layers, "MIN_DEPTHWISE_MACS", 0)  # the cases' small layers too
    x_shape, k, stride, padding = CASES[case]
    rng = np.random.default_rng(case)
    n, c = x_shape[:2]
    geom = ConvGeometry(c, c, x_shape[2:], (k, k), stride, padding)
    w, b = rng.standard_normal((c, 1, k, k)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    serial = DepthwiseConv2d(geom, w, b, options=RunOptions(1), activation=(2, 0.0, 6.0))
    on_team = DepthwiseConv2d(geom, w, b, options=RunOptions(2), activation=(2, 0.0, 6.0))
    assert serial._team_form is None and on_team._team_form is not None, on_team.algorithm
    assert DepthwiseConv2d(geom, w, b, options=RunOptions(2), team=False)._team_form is None
    x = rng.standard_normal(x_shape).astype(np.float32)
    residual = rng.standard_normal(serial.output_shape(n)).astype(np.float32) if with_residual else None
    want = serial(x, residual=residual)
    ran = record_team_calls(monkeypatch)
    np.testing.assert_array_equal(on_team(x, residual=residual), want)
    assert ran == [on_team.algorithm], ran
    ran.clear()
    guard = on_team._team_form.team.guard
    guard.on, guard._serial_left = False, 5
    np.testing.assert_array_equal(on_team(x, residual=residual), want)
    assert ran == [] and guard._serial_left == 4  # the guard counts the calls it held off


def test_plan_layers_leave_the_team_to_the_plan():
    from lowerkit_nnpack.plan import Plan

    module = depthwise_module((1, 16, 28, 28), 3, (1, 1), (1, 1, 1, 1))
    for threads in (1, 2):
        lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": threads}})
        (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
        layers = [cell.cell_contents for step in plan.steps for cell in (step.kernel.__closure__ or ())
                  if hasattr(cell.cell_contents, "__self__")]
        assert layers
        for bound in layers:
            layer = getattr(bound.__self__, "conv", bound.__self__)
            assert getattr(layer, "_team_form", None) is None


def test_eight_threads_share_a_kernel_api_layer_on_the_team():
    from tests.team_calls import skip_without_team

    from lowerkit_nnpack.conv import RunOptions
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.geometry import ConvGeometry

    skip_without_team()
    rng = np.random.default_rng(8)
    geom = ConvGeometry(64, 64, (28, 28), (5, 5), (1, 1), (2, 2, 2, 2))
    w = rng.standard_normal((64, 1, 5, 5)).astype(np.float32)
    layer, serial = DepthwiseConv2d(geom, w, options=RunOptions(2)), DepthwiseConv2d(geom, w, options=RunOptions(1))
    assert layer._team_form is not None
    xs = [rng.standard_normal((2, 64, 28, 28)).astype(np.float32) for _ in range(8)]
    expected = [serial(x) for x in xs]
    errors = []

    def work(i):
        for _ in range(5):
            if not np.array_equal(layer(xs[i]), expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
