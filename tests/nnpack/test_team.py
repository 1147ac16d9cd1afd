"""nnpack's team regions (one image on several cores, each layer one compiled parallel
region): which plans take them, layer kinds against the reference backend (pointwise,
strided and tiled implicit GEMM, depthwise kinds, fused residual, fully-connected), the
serial forms while the stall guard is off, and LOWERKIT_NNPACK_TEAM=0."""

from __future__ import annotations

import numpy as np
import pytest

from tests.team_calls import record_team_calls, rows_kernel, team_on_small_layers

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType
from lowerkit.opset import get_schema

nnpack = pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _team_on_small_layers(monkeypatch):
    team_on_small_layers(monkeypatch, tiled_pixels=256)  # the 7x7 stem below runs in tiles ...
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "TEAM_MAX_INPUTS", 100)  # ... once its 147 rows of columns leave the panel GEMM


def _add(g, op, ins, attrs=None):
    schema = get_schema(op)
    full = schema.normalize_attrs(attrs or {})
    (t,) = schema.infer([v.type for v in ins], full)
    return g.add_node(op, ins, [t], full).output


def _param_maker(g, params, seed):
    """``param(name, shape, scale=0.3)``: a random weight in ``params`` and its param node in ``g``."""
    rng = np.random.default_rng(seed)

    def param(name, shape, scale=0.3):
        params[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
        return g.add_node("param", [], [TensorType("f32", shape)], {"name": name}).output

    return param


def mobile_net(seed=0):
    """7x7/2 stem (tiled implicit GEMM) + relu, 1x1 expand + relu6, depthwise 3x3 (flat),
    depthwise 5x5 (blocked), 1x1 project + residual, 3x3 Winograd + residual + relu, strided
    3x3 (im2col), depthwise 3x3 /2 (blocked: a 5x5 output),
    linear over the last axis."""
    g, params = Graph(), {}
    param = _param_maker(g, params, seed)

    x = g.add_input("x", TensorType("f32", (1, 5, 40, 40)))  # 5 channels: more than a direct stem takes
    y = _add(g, "relu", [_add(g, "conv2d", [x, param("stem", (8, 5, 7, 7)), param("stem_b", (8,))],
                              {"stride": (2, 2), "padding": (3, 3, 3, 3)})])
    e = _add(g, "relu6", [_add(g, "conv2d", [y, param("expand", (24, 8, 1, 1)), param("expand_b", (24,))])])
    e = _add(g, "relu6", [_add(g, "conv2d", [e, param("dw3", (24, 1, 3, 3)), param("dw3_b", (24,))],
                               {"padding": (1, 1, 1, 1), "groups": 24})])
    e = _add(g, "conv2d", [e, param("dw5", (24, 1, 5, 5))], {"padding": (2, 2, 2, 2), "groups": 24})
    p = _add(g, "conv2d", [e, param("project", (8, 24, 1, 1)), param("project_b", (8,))])
    y = _add(g, "add", [p, y])
    w3 = _add(g, "conv2d", [y, param("wino", (8, 8, 3, 3)), param("wino_b", (8,))], {"padding": (1, 1, 1, 1)})
    y = _add(g, "relu", [_add(g, "add", [w3, y])])  # Winograd wt6x6 (25 tiles), residual, relu
    y = _add(g, "relu", [_add(g, "conv2d", [y, param("down", (16, 8, 3, 3))], {"stride": (2, 2), "padding": (1, 1, 1, 1)})])
    y = _add(g, "conv2d", [y, param("dw_s2", (16, 1, 3, 3))], {"stride": (2, 2), "padding": (1, 1, 1, 1), "groups": 16})
    g.set_outputs([_add(g, "linear", [y, param("fc", (10, 5)), param("fc_b", (10,))])])  # over the last axis
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
        node.attrs = get_schema(node.op).normalize_attrs(node.attrs)
    return Module(params, {"forward": GraphMethod(g)}, name="MobileNet")


def _lowered_on_team(g, params, name, monkeypatch):
    """Number ``g``'s nodes, lower its module to a two-thread nnpack plan (checked to be a team
    plan), and start recording the team kernels it calls: (module, lowered, calls)."""
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
    module = Module(params, {"forward": GraphMethod(g)}, name=name)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    assert _plan(lowered).team is not None
    return module, lowered, record_team_calls(monkeypatch)


def _plan(lowered):
    from lowerkit_nnpack.plan import Plan

    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    return plan


@pytest.mark.parametrize("rows", [False, True], ids=["flat-blocked", "rows"])
def test_a_one_image_plan_runs_team_regions_and_matches_the_reference(monkeypatch, rows):
    from lowerkit_nnpack import selection

    stride_one = rows_kernel(monkeypatch, rows)
    monkeypatch.setattr(selection, "TEAM_WINOGRAD_MIN_TILES", 16)  # the 20x20 layer's 25 tiles take wt6x6
    monkeypatch.setattr(selection, "WINOGRAD_MIN_INPUTS", 1)  # and its few channels
    module = mobile_net()
    x = np.random.default_rng(1).standard_normal((1, 5, 40, 40)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    plan = _plan(lowered)
    assert plan.team is not None and plan.blas_threads == 1
    ran = record_team_calls(monkeypatch)
    expected = module(x)
    got = lowered(x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
    assert {"team_gemm", "conv_tiles", "im2col", "team_fc", "winograd_input",
            "winograd_products_output"} | stride_one <= set(ran), ran
    assert "wt6x6" in plan.algorithms.values()
    serial = lk.to_backend(module, "nnpack", {"forward": {"threads": 1}})
    assert _plan(serial).team is None
    np.testing.assert_allclose(got, serial(x), rtol=0, atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def test_serial_forms_while_the_guard_is_off_and_the_switch(monkeypatch):
    module = mobile_net(seed=2)
    x = np.random.default_rng(3).standard_normal((1, 5, 40, 40)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    expected = lowered(x)
    guard = _plan(lowered).team.guard
    guard.on, guard._serial_left = False, 5
    ran = record_team_calls(monkeypatch)
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
    assert ran == []
    monkeypatch.setenv("LOWERKIT_NNPACK_TEAM", "0")
    assert _plan(lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})).team is None


def test_eight_threads_share_a_team_plan():
    """The team forms' scratch is per thread (the plan's workspace): concurrent callers of one
    lowered module get their own results (within rounding: contended calls stall, and the
    stall guard may run some of them in the serial forms)."""
    from tests.team_calls import from_threads

    module = mobile_net(seed=4)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 5, 40, 40)).astype(np.float32) for _ in range(8)]
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    assert _plan(lowered).team is not None
    expected = [lowered(x) for x in xs]
    results = from_threads(lambda i: [lowered(xs[i]) for _ in range(4)])
    for i in range(8):
        for got in results[i]:
            np.testing.assert_allclose(got, expected[i], rtol=0, atol=1e-5 * max(1.0, float(np.abs(expected[i]).max())))


def gated_projection(g, param, x, *, with_map: bool = False):
    """On 8-channel ``x``: conv + silu to 32 channels, a depthwise 3x3, a squeeze-excitation
    gate (pool, 1x1 + relu, 1x1 + sigmoid), the map times the gate, then a 1x1 projection back
    to 8 channels (fewer than the pixels): its output (and, ``with_map``, the gate's map)."""
    y = _add(g, "silu", [_add(g, "conv2d", [x, param("expand", (32, 8, 1, 1)), param("expand_b", (32,))])])
    y = _add(g, "conv2d", [y, param("dw", (32, 1, 3, 3))], {"padding": (1, 1, 1, 1), "groups": 32})
    s = _add(g, "global_avg_pool2d", [y])
    s = _add(g, "relu", [_add(g, "conv2d", [s, param("se1", (4, 32, 1, 1)), param("se1_b", (4,))])])
    s = _add(g, "sigmoid", [_add(g, "conv2d", [s, param("se2", (32, 4, 1, 1)), param("se2_b", (32,))])])
    out = _add(g, "conv2d", [_add(g, "mul", [y, s]), param("project", (8, 32, 1, 1)), param("project_b", (8,))])
    return (out, y) if with_map else out


def numbered_module(g, params, name):
    """``g`` as a module's forward, its nodes numbered and their attributes normalised."""
    for i, node in enumerate(g.nodes):
        node.debug_handle = i + 1
        node.attrs = get_schema(node.op).normalize_attrs(node.attrs)
    return Module(params, {"forward": GraphMethod(g)}, name=name)


def se_net(seed=0, batch=1, map_read_later=False):
    """:func:`gated_projection` (its depthwise layer makes a batch run image by image on the
    team) with the input added back as a residual; ``map_read_later``: the gate's map is
    read after the projection too (a second output, its ReLU), so it does not die there."""
    g, params = Graph(), {}
    param = _param_maker(g, params, seed)
    x = g.add_input("x", TensorType("f32", (batch, 8, 12, 12)))
    out, y = gated_projection(g, param, x, with_map=True)
    out = _add(g, "add", [out, x])
    g.set_outputs([out, _add(g, "relu", [y])] if map_read_later else [out])
    return numbered_module(g, params, "SqueezeExcite")


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("map_read_later", [False, True])
@pytest.mark.parametrize("panel", ["weight", "map", "none"])
def test_a_gate_multiply_folds_into_the_projection(monkeypatch, batch, map_read_later, panel):
    """The team form scales the weight by each image's gate. Off the team (the stall guard,
    a batch slice), where the panel GEMM takes the layer on one thread, each image's gate
    scales a copy of its packed weight — but a map that dies at the projection with few pixels
    per output channel (``map``: the bound raised above this one's 18) is scaled in place, and
    the layer runs its serial form. Without the panel GEMM (``none``) the same in-place form
    where the map dies there, and where it is read later the weight scaled per image, one sgemm."""
    from lowerkit.backend.cpu.panels import PackedWeight
    from lowerkit_nnpack import team
    from lowerkit_nnpack.algorithms.implicit_gemm import ImplicitGemm

    if panel == "none":
        monkeypatch.setattr(ImplicitGemm, "panel_weight", lambda self, bias: None)
    if panel == "map":
        monkeypatch.setattr(team, "WEIGHT_GATE_PIXELS_PER_ROW", 19)  # 144 pixels, 8 output channels: 18 each
    module = se_net(batch=batch, map_read_later=map_read_later)
    x = np.random.default_rng(6).standard_normal((batch, 8, 12, 12)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    plan = _plan(lowered)
    assert not any(step.node.op == "mul" for step in plan.steps)  # folded into the projection
    from lowerkit_nnpack.team import TeamConv

    (projection,) = [layer for layer in _step_layers(plan) if isinstance(layer, TeamConv) and layer.pointwise
                     and layer.w2.shape == (8, 32)]
    assert projection.gate_in_place is not map_read_later
    expected = module(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    scale = max(1.0, max(float(np.abs(e).max()) for e in expected))

    def check(got) -> None:
        got = got if isinstance(got, (tuple, list)) else (got,)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * scale)

    check(lowered(x))
    guard = plan.team.guard
    guard.on, guard._serial_left = False, 5
    serial, scaled, gated_panels = [], [], []
    real, real_scale, real_panels = TeamConv._gated_serial, team.scale_planes, PackedWeight.bind_gated_images
    monkeypatch.setattr(TeamConv, "_gated_serial", lambda self, *a: serial.append(a) or real(self, *a))
    monkeypatch.setattr(team, "scale_planes", lambda *a: scaled.append(a) or real_scale(*a))
    monkeypatch.setattr(PackedWeight, "bind_gated_images",
                        lambda self, *a: gated_panels.append(a) or real_panels(self, *a))
    check(lowered(x))
    check(lowered(x))  # the bound serial form
    from lowerkit.backend.cpu.team import team_off

    with team_off():  # as a worker runs a slice of the batch: every image in one call
        check(plan._run([x]))
    in_place = not map_read_later and panel != "weight"
    if in_place:  # the map scaled in place, then the layer's call
        assert gated_panels == [] and serial == [] and scaled
    elif panel != "none":
        assert gated_panels and serial == [] and scaled == []
        assert len(gated_panels[-1][0]) == batch  # the slice's call: every image's gate
    else:
        assert gated_panels == [] and scaled == []
        assert serial and all(call[2] is not None for call in serial)  # the projection, its residual
        assert len(serial[-1][0]) == batch
    monkeypatch.setenv("LOWERKIT_NNPACK_TEAM", "0")
    unfolded = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    assert any(step.node.op == "mul" for step in _plan(unfolded).steps)
    check(unfolded(x))


def _step_layers(plan) -> list:
    """The layers whose methods the plan's steps call (from the steps' closures)."""
    layers = []
    for step in plan.steps:
        for cell in getattr(step.kernel, "__closure__", None) or ():
            layer = getattr(cell.cell_contents, "__self__", None)
            if layer is not None and layer not in layers:
                layers.append(layer)
    return layers


@pytest.mark.parametrize("batch", [1, 3])
def test_a_gated_projection_on_the_panel_gemm_adds_its_residual_in_the_region(monkeypatch, batch):
    """Where the panel GEMM takes the projection (every layer with the wide tile), its team
    form scales each thread's copy of the packed weight by the gate and adds the residual in
    the same region (PackedWeight.run_team_gated), against the reference."""
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "_RULES", ["wide"])
    calls = []
    real = panels.PackedWeight.run_team_gated
    monkeypatch.setattr(panels.PackedWeight, "run_team_gated",
                        lambda self, gate, copies, x, out, act, ways, residual=None:
                        (calls.append(residual is not None), real(self, gate, copies, x, out, act, ways, residual))[1])
    module = se_net(batch=batch)
    x = np.random.default_rng(6).standard_normal((batch, 8, 12, 12)).astype(np.float32)
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    expected = module(x)
    np.testing.assert_allclose(lowered(x), expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
    assert calls and all(calls)  # every image's projection, its residual fused


def test_plan_steps_enter_team_layers_through_run_into(monkeypatch):
    """A team plan's convolution steps call ``run_into`` (their output buffer from the plan,
    no checks for other callers); while the guard holds the team off it falls back to the
    layer's own ``run_into`` (its serial form, still without the checks), with the same result."""
    from lowerkit_nnpack.conv import Conv2d
    from lowerkit_nnpack.depthwise import DepthwiseConv2d
    from lowerkit_nnpack.team import TeamConv, TeamDepthwise

    module = mobile_net(seed=6)
    x = np.random.default_rng(7).standard_normal((1, 5, 40, 40)).astype(np.float32)
    entries: list[str] = []
    for cls in (TeamConv, TeamDepthwise, Conv2d, DepthwiseConv2d):
        for name in ("run_into", "__call__"):
            real = getattr(cls, name)
            monkeypatch.setattr(cls, name, lambda self, *a, _f=real, _n=f"{cls.__name__}.{name}", **k:
                                (entries.append(_n), _f(self, *a, **k))[1])
    lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": 2}})  # its steps bind run_into
    expected = module(x)
    got = lowered(x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
    # stem, expand, project, Winograd and strided convolutions; 3x3, 5x5 and strided depthwise layers
    assert entries.count("TeamConv.run_into") == 5 and entries.count("TeamDepthwise.run_into") == 3, entries
    assert len(entries) == 8, entries
    entries.clear()
    guard = _plan(lowered).team.guard
    guard.on, guard._serial_left = False, 5
    np.testing.assert_allclose(lowered(x), got, rtol=0, atol=1e-5 * max(1.0, float(np.abs(got).max())))
    assert entries.count("TeamConv.run_into") == 5 and entries.count("TeamDepthwise.run_into") == 3, entries
    assert entries.count("Conv2d.run_into") == 5 and entries.count("DepthwiseConv2d.run_into") == 3, entries
    assert len(entries) == 16, entries  # no __call__: neither the team forms' nor the layers'


def test_max_pool_runs_as_a_team_region(monkeypatch):
    """ResNet's stem in a team plan: a convolution, then the 3x3 stride-2 max pool in bands of planes."""
    rng = np.random.default_rng(5)
    g = Graph()
    params = {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)}
    x = g.add_input("x", TensorType("f32", (1, 3, 20, 18)))
    w = g.add_node("param", [], [TensorType("f32", (8, 3, 3, 3))], {"name": "w"}).output
    y = _add(g, "relu", [_add(g, "conv2d", [x, w], {"padding": (1, 1, 1, 1)})])
    g.set_outputs([_add(g, "max_pool2d", [y], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)})])
    module, lowered, ran = _lowered_on_team(g, params, "Stem", monkeypatch)
    xs = rng.standard_normal((1, 3, 20, 18)).astype(np.float32)
    np.testing.assert_allclose(lowered(xs), module(xs), rtol=1e-5, atol=1e-6)
    assert "max_pool3x3" in ran, ran


def test_a_one_row_linear_layer_is_numpys_matrix_vector_product(monkeypatch):
    """A linear layer over one row (a flattened image) skips the team region (numpy's gemv
    beat two sgemm bands); over several rows it is one. Both match the reference."""
    g, params = Graph(), {}
    param = _param_maker(g, params, 3)
    x = g.add_input("x", TensorType("f32", (1, 3, 8, 8)))
    y = _add(g, "conv2d", [x, param("conv", (4, 3, 3, 3))], {"padding": (1, 1, 1, 1)})
    y = _add(g, "linear", [y, param("rows", (5, 8)), param("rows_b", (5,))])  # [1, 4, 8, 5]: 32 rows
    y = _add(g, "flatten", [y])
    g.set_outputs([_add(g, "linear", [y, param("head", (7, 160)), param("head_b", (7,))])])
    module, lowered, ran = _lowered_on_team(g, params, "Heads", monkeypatch)
    xv = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    from lowerkit_nnpack.layers import Linear

    general = []
    real = Linear.__call__
    monkeypatch.setattr(Linear, "__call__", lambda self, *a: general.append(a) or real(self, *a))
    got = lowered(xv)
    assert ran.count("team_fc") == 1, ran  # 32 rows: row panels against the packed bands
    assert general == []  # the one row took numpy's product directly, not the general layer
    expected = lk.to_backend(module, "reference")(xv)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_wt6x6_channel_gemms_on_the_packed_kernel(monkeypatch):
    """A wt6x6 layer of 128 input channels on a 14x14 map (``panels.tuples_fit``) multiplies
    its transformed kernel packed for the panel GEMM: in the team regions at batch 1, in the
    serial form of a one-thread plan at batch 2, and on the pool's two workers (no team: blocks
    of whole panels), each matching the reference."""
    from lowerkit.backend.cpu import panels
    from lowerkit_nnpack import selection

    monkeypatch.setattr(panels, "rules", lambda: "wide")  # the rule as measured, on any CPU
    monkeypatch.setattr(selection, "TEAM_WINOGRAD_MIN_TILES", 16)
    monkeypatch.setattr(selection, "WINOGRAD_MIN_INPUTS", 1)  # and its few channels
    runs: list[int] = []
    original = panels.PackedTuples.run
    monkeypatch.setattr(panels.PackedTuples, "run", lambda self, *a: (runs.append(a[2]), original(self, *a))[1])
    for batch, threads, team in ((1, 2, "1"), (2, 1, "1"), (1, 2, "0")):
        monkeypatch.setenv("LOWERKIT_NNPACK_TEAM", team)
        g, params = Graph(), {}
        param = _param_maker(g, params, seed=5)
        x = g.add_input("x", TensorType("f32", (batch, 128, 14, 14)))
        y = _add(g, "conv2d", [x, param("w", (132, 128, 3, 3), 0.05), param("b", (132,))], {"padding": (1, 1, 1, 1)})
        g.set_outputs([_add(g, "relu", [y])])
        for i, node in enumerate(g.nodes):
            node.debug_handle = i + 1
        module = Module(params, {"forward": GraphMethod(g)}, name="Wino")
        lowered = lk.to_backend(module, "nnpack", {"forward": {"threads": threads}})
        assert "wt6x6" in _plan(lowered).algorithms.values()
        ran = record_team_calls(monkeypatch)
        runs.clear()
        data = np.random.default_rng(6).standard_normal((batch, 128, 14, 14)).astype(np.float32)
        expected = module(data)
        np.testing.assert_allclose(lowered(data), expected, rtol=0, atol=1e-4 * max(1.0, float(np.abs(expected).max())))
        if team == "0":
            assert _plan(lowered).team is None and sorted(runs) == [16, 16], runs  # 66 + 66 channels
        elif threads == 2:
            assert "winograd_panels_output" in ran and "winograd_products_output" not in ran, ran
        else:
            assert runs == [batch * 16], runs  # both images' tiles, all panels at once
