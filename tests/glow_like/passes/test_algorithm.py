"""Algorithm selection alone, and the Winograd kernel against the reference."""

from __future__ import annotations

import numpy as np
from tests.glow_like.helpers import assert_close, f32, module_of, reference

from lowerkit.ir import Graph
from lowerkit_glow_like._graph import evaluate, working_graph
from lowerkit_glow_like.passes import select_conv_algorithm


def _conv_module(channels: int, hw: int, stride: int = 1, batch: int = 1):
    g = Graph()
    x = g.add_input("x", f32(batch, channels, hw, hw))
    w = g.add_node("param", [], [f32(channels, channels, 3, 3)], {"name": "w"}).output
    b = g.add_node("param", [], [f32(channels)], {"name": "b"}).output
    out = (hw + 2 - 3) // stride + 1
    y = g.add_node("conv2d", [x, w, b], [f32(batch, channels, out, out)],
                   {"stride": (stride, stride), "padding": (1, 1, 1, 1)}).output
    g.set_outputs([y])
    rng = np.random.default_rng(0)
    params = {"w": (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32),
              "b": rng.standard_normal(channels).astype(np.float32)}
    return module_of(g, params)


def test_marks_wide_3x3_stride_1_convs_and_keeps_results():
    module = _conv_module(256, 15, batch=4)  # 256 tiles; odd output size: the staged output path
    x = np.random.default_rng(1).standard_normal((4, 256, 15, 15)).astype(np.float32)
    work = working_graph(module, "forward")
    assert select_conv_algorithm(work) is True
    conv = next(n for n in work.nodes if n.op == "conv2d")
    assert conv.attrs["algo"] == "winograd"
    assert_close(evaluate(work, [x]), reference(module, x))


def test_leaves_narrow_strided_or_few_tile_convs_alone():
    # 512x7x7 at batch 1 has 231 MFLOP but only 4 output tiles: memory-bound as Winograd.
    for module in (_conv_module(32, 8), _conv_module(256, 8, stride=2), _conv_module(512, 7)):
        work = working_graph(module, "forward")
        assert select_conv_algorithm(work) is False


def test_a_partial_winograd_chunk_multiplies_only_its_images_columns(monkeypatch):
    """The last chunk of a batch (here 1 image of 2) multiplies its own images' columns of the
    transformed input, not the whole chunk's (the others hold a previous chunk's data), with
    the same results, serial, on workers and on a team."""
    from lowerkit_glow_like.kernels import KERNELS, winograd
    from lowerkit.backend.cpu import Parallel, make_team

    monkeypatch.setattr(winograd, "_TILES", 600)  # 17x16 tiles per image: 2 images per chunk
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 64, 63)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    attrs = {"stride": (1, 1), "padding": (1, 0, 2, 2), "dilation": (1, 1), "groups": 1, "act": "relu"}
    expected = np.empty((3, 5, 65, 63), np.float32)
    KERNELS["conv2d"].prepare([x, w, b], [expected], attrs, None)()
    columns: list[int] = []
    matmul = np.matmul

    def spy(a, b, *args, **kwargs):
        if np.ndim(b) == 3 and b.shape[0] == 36:  # a band's 36 channel GEMMs
            columns.append(b.shape[2])
        return matmul(a, b, *args, **kwargs)

    monkeypatch.setattr(winograd.np, "matmul", spy)
    team = make_team(2)
    forms = [{}, {"parallel": Parallel(2)}] + ([{"team": team}] if team is not None else [])
    for form in forms:
        columns.clear()
        got = np.empty_like(expected)
        KERNELS["conv2d"].prepare([x, w, b], [got], {**attrs, "algo": "winograd"}, None, **form)()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        if not form:
            assert columns == [2 * 17 * 16, 17 * 16]  # two images, then the last one alone


def test_winograd_kernel_matches_im2col_with_partial_chunks_and_workers(monkeypatch):
    from lowerkit_glow_like.kernels import KERNELS, winograd
    from lowerkit.backend.cpu import Parallel

    monkeypatch.setattr(winograd, "_TILES", 600)  # 17x16 tiles per image: 2 images per chunk
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 64, 63)).astype(np.float32)  # a partial last chunk, odd width
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    attrs = {"stride": (1, 1), "padding": (1, 0, 2, 2), "dilation": (1, 1), "groups": 1, "act": "relu"}
    expected = np.empty((3, 5, 65, 63), np.float32)
    KERNELS["conv2d"].prepare([x, w, b], [expected], attrs, None)()
    for parallel in (None, Parallel(2)):
        got = np.empty_like(expected)
        KERNELS["conv2d"].prepare([x, w, b], [got], {**attrs, "algo": "winograd"}, None, parallel=parallel)()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_winograd_channel_gemms_on_the_packed_weight_in_every_form(monkeypatch):
    """Where ``panels.tuples_fit`` (128 inputs, 16 tiles: ResNet's 14x14 layers at batch 1),
    the 36 channel GEMMs run on the packed transformed weight — serial, on workers (bands of
    whole panels) and on a team — with the reference's results; a writable weight stays on
    sgemm."""
    from tests.team_calls import record_team_calls

    from lowerkit.backend.cpu import Parallel, make_team, panels
    from lowerkit_glow_like.kernels import KERNELS
    from lowerkit_glow_like.kernels.winograd import winograd_weights

    monkeypatch.setattr(panels, "rules", lambda: "wide")  # the rule as measured, on any CPU
    rng = np.random.default_rng(4)
    c, oc = 128, 130  # 130 output channels: a partial last panel
    x = rng.standard_normal((1, c, 14, 14)).astype(np.float32)
    w = (rng.standard_normal((oc, c, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1, "act": "relu"}
    expected = np.empty((1, oc, 14, 14), np.float32)
    KERNELS["conv2d"].prepare([x, w, b], [expected], attrs, None)()
    u = winograd_weights(w, {"algo": "winograd"})
    u.flags.writeable = False  # as a handle keeps its derived constants
    runs: list[int] = []
    original = panels.PackedTuples.run
    monkeypatch.setattr(panels.PackedTuples, "run", lambda self, *a: (runs.append(a[2]), original(self, *a))[1])
    ran = record_team_calls(monkeypatch)
    team = make_team(2)
    forms = [{}, {"parallel": Parallel(2)}] + ([{"team": team}] if team is not None else [])
    for form in forms:
        runs.clear()
        ran.clear()
        got = np.empty_like(expected)
        KERNELS["conv2d"].prepare([x, u, b], [got], {**attrs, "algo": "winograd"}, None, **form)()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        if "team" in form:
            assert ran == ["winograd_input", "winograd_panels_output"]
        else:
            assert runs == [16] * (2 if "parallel" in form else 1)  # each band: the image's 16 tiles
    runs.clear()
    writable = np.array(u)
    KERNELS["conv2d"].prepare([x, writable, b], [np.empty_like(expected)], {**attrs, "algo": "winograd"}, None)()
    assert runs == []


def test_eight_threads_share_a_packed_winograd_layer(monkeypatch):
    """A lowered 192-channel 14x14 Winograd layer (16 tiles: its channel GEMMs on the packed
    weight) called from eight threads at once: every thread gets the reference's result."""
    import lowerkit as lk
    from tests.team_calls import from_threads

    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "rules", lambda: "wide")
    packed: list[int] = []
    original = panels.PackedTuples.of
    monkeypatch.setattr(panels.PackedTuples, "of", classmethod(lambda cls, u: (packed.append(u.shape),
                                                                                original.__func__(cls, u))[1]))
    module = _conv_module(192, 14)
    lowered = lk.to_backend(module, "glow_like")
    xs = [np.random.default_rng(10 + i).standard_normal((1, 192, 14, 14)).astype(np.float32) for i in range(8)]
    results = from_threads(lambda i: [lowered(xs[i]) for _ in range(3)])
    assert packed == [(36, 192, 192)]  # once, for every thread's binding
    for i, outs in results.items():
        expected = reference(module, xs[i])
        for out in outs:
            assert_close([np.asarray(out)], expected)
