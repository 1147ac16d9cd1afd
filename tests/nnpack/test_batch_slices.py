"""Batches as slices in nnpack plans: a graph whose images never meet runs every layer on
each worker's own images, single-threaded (lowerkit_nnpack.plan.batch_sliceable); results
match the whole plan and the reference backend, alone and inside a mixed plan."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit
from lowerkit import models, nn
from lowerkit.ir import Graph, TensorType
from lowerkit_nnpack.plan import Plan, batch_sliceable


def _plans(lowered):
    """The nnpack plans behind a lowered module, or behind the regions of a partitioned one."""
    parts = lowered.regions.values() if hasattr(lowered, "regions") else [lowered]
    return [h.plan for part in parts for h in getattr(part, "_handles", {}).values()
            if isinstance(getattr(h, "plan", None), Plan)]


class _Block(nn.Module):
    """conv -> relu -> conv (+ x) -> relu6 -> max pool: residual add and pooling included."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(6, 6, 3, padding=1)
        self.b = nn.Conv2d(6, 6, 3, padding=1)
        self.act, self.act6, self.pool = nn.ReLU(), nn.ReLU6(), nn.MaxPool2d(2, 2)

    def forward(self, x):
        return self.pool(self.act6(self.b(self.act(self.a(x))) + x))


@pytest.mark.parametrize("batch, threads, sliced", [(3, 2, True), (1, 2, False), (3, 1, False), (3, 4, False)])
def test_slices_match_the_whole_plan_and_the_reference(rng, batch, threads, sliced):
    with nn.init_seed(0):
        net = _Block()
    x = rng.standard_normal((batch, 6, 10, 10)).astype(np.float32)
    module = lowerkit.trace(net, x)
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": threads}})
    (plan,) = _plans(lowered)
    assert plan.sliced is sliced
    if sliced:
        assert plan.blas_threads == 1 and not plan.gemm_on_blas
    whole = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 1}})
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(whole(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(module(x)), rtol=1e-4, atol=1e-4)


def _f32(*shape):
    return TensorType("f32", shape)


def test_graphs_whose_images_meet_are_not_sliceable():
    # A weight that is a runtime input: slicing it by rows would be wrong.
    g = Graph()
    x, w = g.add_input("x", _f32(4, 3, 6, 6)), g.add_input("w", _f32(4, 3, 3, 3))
    y = g.add_node("conv2d", [x, w], [_f32(4, 4, 4, 4)], {"stride": (1, 1), "padding": (0, 0, 0, 0),
                                                         "dilation": (1, 1), "groups": 1}).output
    g.set_outputs([y])
    assert not batch_sliceable(g)
    # The weight gradient sums over the batch.
    g = Graph()
    x, dy = g.add_input("x", _f32(4, 3, 6, 6)), g.add_input("dy", _f32(4, 4, 4, 4))
    dw = g.add_node("conv2d_weight_grad", [x, dy], [_f32(4, 3, 3, 3)],
                    {"weight_shape": (4, 3, 3, 3), "stride": (1, 1), "padding": (0, 0, 0, 0),
                     "dilation": (1, 1), "groups": 1}).output
    g.set_outputs([dw])
    assert not batch_sliceable(g)
    # A softmax over a vector normalises over the batch itself.
    g = Graph()
    v = g.add_input("v", _f32(4))
    g.set_outputs([g.add_node("softmax", [v], [_f32(4)], {"dim": -1}).output])
    assert not batch_sliceable(g)


def test_mixed_plan_with_sliced_regions_matches_the_reference(monkeypatch):
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "0")  # depthwise plans would run image by image
    x = models.example_input("mobilenet_v2", batch=3, small=True)
    module = lowerkit.trace(models.get("mobilenet_v2", small=True), x)
    lowered = lowerkit.to_backend(module, ["nnpack", "glow_like"])
    assert any(p.sliced for p in _plans(lowered))
    np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(module(x)), rtol=1e-4, atol=1e-4)


def test_depthwise_plans_run_image_by_image_on_the_team(monkeypatch):
    """A sliceable batch of a plan with depthwise layers runs one image at a time, each on the
    team: same results as the sliced plan and the reference, from 8 threads too."""
    from tests.team_calls import check_from_threads, record_team_calls, team_on_small_layers

    from lowerkit.backend.cpu import cpu_count

    team_on_small_layers(monkeypatch)
    if cpu_count() < 2:
        pytest.skip("one core: plans run serially")
    x = models.example_input("mobilenet_v2", batch=3, small=True)
    module = lowerkit.trace(models.get("mobilenet_v2", small=True), x)
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "1")  # no trial against slices
    lowered = lowerkit.to_backend(module, ["nnpack"])  # batch norms folded first (a partition's passes)
    (plan,) = _plans(lowered)
    assert plan.per_image and not plan.sliced and plan.team is not None and plan.blas_threads == 1
    assert plan.form_trial is None
    ran = record_team_calls(monkeypatch)
    got = np.asarray(lowered(x))
    assert ran
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "0")
    sliced = lowerkit.to_backend(module, ["nnpack"])
    (slices,) = _plans(sliced)
    assert slices.sliced and not slices.per_image
    np.testing.assert_allclose(got, np.asarray(sliced(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.asarray(module(x)), rtol=1e-4, atol=1e-4)
    check_from_threads(lowered, module, x)

def _on_trial(monkeypatch, batch: int):
    """A small MobileNetV2 batch lowered to nnpack with team forms on its small layers, whose
    plan times image by image against slices: (input, expected output, lowered, plan)."""
    from tests.team_calls import team_on_small_layers

    from lowerkit.backend.cpu import cpu_count

    team_on_small_layers(monkeypatch)
    if cpu_count() < 2:
        pytest.skip("one core: plans run serially")
    x = models.example_input("mobilenet_v2", batch=batch, small=True)
    module = lowerkit.trace(models.get("mobilenet_v2", small=True), x)
    lowered = lowerkit.to_backend(module, ["nnpack"])
    (plan,) = _plans(lowered)
    assert plan.per_image and plan.form_trial is not None
    return x, np.asarray(module(x)), lowered, plan


def test_the_first_calls_choose_between_images_and_slices(monkeypatch):
    """By default a depthwise plan's sliceable batch times both forms on its first calls,
    in pairs of calls: image by image on the team, and slices whose workers run the serial forms
    (no team region); both match the reference, and the faster form is kept."""
    from tests.team_calls import record_team_calls

    x, expected, lowered, plan = _on_trial(monkeypatch, batch=3)
    trial = plan.form_trial
    ran = record_team_calls(monkeypatch)
    forms = []
    while trial.choice is None:
        form = trial.form()
        ran.clear()
        got = np.asarray(lowered(x))
        forms.append((form, bool(ran)))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert {f for f, _ in forms} == {0, 1}
    assert all(team == (form == 0) for form, team in forms)  # slices: serial forms only
    assert trial.choice == (0 if trial.scores[0] <= trial.scores[1] else 1)
    ran.clear()
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert bool(ran) == (trial.choice == 0)


def test_slices_on_trial_keep_the_image_form_s_spares(monkeypatch):
    """The calling thread runs one slice of a slices call and every image of an image-by-image
    call: the two forms keep separate spares there, so alternating them (the form trial) does
    not plan, bind and chain each one's buffers anew at every switch."""
    x, expected, lowered, plan = _on_trial(monkeypatch, batch=4)
    trial = plan.form_trial
    trial.choice = 0
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    images = plan._local.spares
    arena, bound = images.arena_in_use(), dict(images.bound)
    assert arena is not None and bound
    trial.choice = 1
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert plan._local.slice_spares is not images and plan._local.slice_spares.bound
    assert plan._local.spares is images and images.arena_in_use() is arena
    assert images.bound.keys() == bound.keys() and all(images.bound[k] is bound[k] for k in bound)
    trial.choice = 0
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-4, atol=1e-4)
    assert images.arena_in_use() is arena and all(images.bound[k] is bound[k] for k in bound)


class _LargeThenSmall(nn.Module):
    """The residual block at 32x32 (1024 pixels), pooled to 16x16, then a conv there."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.c = _Block(), nn.Conv2d(6, 5, 3, padding=1)

    def forward(self, x):
        return self.c(self.block(x))


def _with_and_without_head(net, x, monkeypatch):
    """``net`` traced on ``x`` and lowered to nnpack on two workers, with slices' heads and
    without (``LOWERKIT_NNPACK_SLICE_HEAD=0``): (module, lowered, its plan, lowered without)."""
    module = lowerkit.trace(net, x)
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    (plan,) = _plans(lowered)
    monkeypatch.setenv("LOWERKIT_NNPACK_SLICE_HEAD", "0")
    layers = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    monkeypatch.delenv("LOWERKIT_NNPACK_SLICE_HEAD")
    assert _plans(layers)[0].head == 0
    return module, lowered, plan, layers


def test_a_slice_runs_its_head_image_by_image_and_computes_the_same(rng, monkeypatch):
    """The steps through the last on a 1024-pixel map (here the pool, which reads one) run
    image by image in a slice of two or more images; a slice of one image has no head."""
    with nn.init_seed(0):
        net = _LargeThenSmall()
    x = rng.standard_normal((5, 6, 32, 32)).astype(np.float32)
    module, lowered, plan, layers = _with_and_without_head(net, x, monkeypatch)
    assert plan.sliced and [step.node.op for step in plan.steps[plan.head:]] == ["conv2d"]
    assert len(plan._crossing) == 1  # the pooled map
    for _ in range(3):  # the spares plan their arena after the first call
        np.testing.assert_array_equal(np.asarray(lowered(x)), np.asarray(layers(x)))
    np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(module(x)), rtol=1e-4, atol=1e-4)
    one_each = lowerkit.to_backend(lowerkit.trace(net, x[:2]), "nnpack", {"forward": {"threads": 2}})
    assert _plans(one_each)[0].head == plan.head  # bound, but slices of one image skip it
    np.testing.assert_array_equal(np.asarray(one_each(x[:2])), np.asarray(lowered(x))[:2])


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0", "resnet18"])
def test_zoo_heads_match_slices_run_layer_by_layer(name, monkeypatch):
    """At 64x64 the small zoo models have heads of several steps (residual adds, gates inside),
    in the one nnpack region of ``[nnpack, glow_like]`` (batch norm folded first)."""
    x = np.random.default_rng(5).standard_normal((5, 3, 64, 64)).astype(np.float32)
    module = lowerkit.trace(models.get(name, small=True), x)
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "0")  # slices, not image by image on the team
    spec = {"forward": {"nnpack": {"threads": 2}}}
    lowered = lowerkit.to_backend(module, ["nnpack", "glow_like"], spec)
    (plan,) = _plans(lowered)
    assert plan.sliced and plan.head >= 2
    monkeypatch.setenv("LOWERKIT_NNPACK_SLICE_HEAD", "0")
    layers = lowerkit.to_backend(module, ["nnpack", "glow_like"], spec)
    expected = np.asarray(layers(x))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-5, atol=1e-5)


def test_slices_with_a_head_allocate_only_their_outputs_in_steady_state(monkeypatch):
    """The head's per-image values and the joined maps come from the spares' arena."""
    import tracemalloc

    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "0")
    x = np.random.default_rng(5).standard_normal((6, 3, 64, 64)).astype(np.float32)
    module = lowerkit.trace(models.get("mobilenet_v2", small=True), x)
    lowered = lowerkit.to_backend(module, ["nnpack", "glow_like"], {"forward": {"nnpack": {"threads": 2}}})
    assert _plans(lowered)[0].head >= 2
    for _ in range(4):  # the spares plan their arena after the first call
        out = np.asarray(lowered(x))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        lowered(x)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes + 128 * 1024, f"a call allocated {peak} bytes (output {out.nbytes})"


def _sliced_mobilenet(monkeypatch, batch: int = 6):
    """MobileNetV2 (small) at 64x64 in the one nnpack region of ``[nnpack, glow_like]``, run as
    slices of ``batch // 2`` images with a head: (x, lowered, plan, the layer-by-layer result)."""
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", "0")
    x = np.random.default_rng(8).standard_normal((batch, 3, 64, 64)).astype(np.float32)
    module = lowerkit.trace(models.get("mobilenet_v2", small=True), x)
    spec = {"forward": {"nnpack": {"threads": 2}}}
    lowered = lowerkit.to_backend(module, ["nnpack", "glow_like"], spec)
    (plan,) = _plans(lowered)
    monkeypatch.setenv("LOWERKIT_NNPACK_SLICE_HEAD", "0")
    expected = np.asarray(lowerkit.to_backend(module, ["nnpack", "glow_like"], spec)(x))
    monkeypatch.delenv("LOWERKIT_NNPACK_SLICE_HEAD")
    assert plan.sliced and plan.head >= 2
    for _ in range(4):  # recorded, arena planned, bound, then chained
        np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-5, atol=1e-5)
    return x, lowered, plan, expected


def test_a_slices_head_and_rest_replay_as_chains(monkeypatch):
    """Each image's head steps and the steps after the head replay their bound calls as chains
    (per image, and for the rest, on each thread): no step's kernel runs but those that read
    the call's input or write its output, and the results stay the same."""
    x, lowered, plan, expected = _sliced_mobilenet(monkeypatch)
    local = plan._local  # the calling thread runs the first slice
    images = len(x) // 2
    assert len(local.head_chains) >= images and all(local.head_chains[i] for i in range(images))
    assert local.rest_chains
    chained = {plan._head[c.start + k].key for c in local.head_chains[0] for k in range(c.stop - c.start)}
    chained |= {plan._rest[c.start + k].key for c in local.rest_chains for k in range(c.stop - c.start)}
    ran: list[int] = []
    for step in plan.steps:
        object.__setattr__(step, "kernel", lambda *a, _k=step.kernel, _s=step: (ran.append(_s.key), _k(*a))[1])
    got = np.asarray(lowered(x))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert ran and not chained & set(ran), "a chained step ran its kernel"
    # (the steps that read the call's input or write its output; fewer steps where inverted-residual
    # blocks are one step each)
    assert len(ran) <= len(plan.steps) // 4, f"{len(ran)} of {len(plan.steps)} steps ran their kernels per image"


def test_a_head_chain_that_no_longer_holds_runs_step_by_step_then_is_rebuilt(monkeypatch):
    import dataclasses

    x, lowered, plan, expected = _sliced_mobilenet(monkeypatch)
    local = plan._local
    chains = local.head_chains[1]
    spans = [(c.start, c.stop) for c in chains]
    chain = chains[0]
    assert chain.outside
    moved = dataclasses.replace(chain, outside=tuple((slot, array.copy()) for slot, array in chain.outside))
    local.head_chains[1] = (moved, *chains[1:])
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-5, atol=1e-5)
    assert local.head_chains[1] is None and local.head_chains[0] is not None  # only that image's dropped
    np.testing.assert_allclose(np.asarray(lowered(x)), expected, rtol=1e-5, atol=1e-5)
    assert [(c.start, c.stop) for c in local.head_chains[1]] == spans


class _WinogradHead(nn.Module):
    """A 64-channel 3x3 layer at 32x32 (``wt6x6``) and a stride-2 one in the head, a conv after."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(64, 64, 3, padding=1)
        self.b = nn.Conv2d(64, 8, 3, stride=2, padding=1)
        self.c = nn.Conv2d(8, 8, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.c(self.b(self.act(self.a(x))))


def test_a_head_with_a_winograd_layer_matches_layer_by_layer(rng, monkeypatch):
    with nn.init_seed(0):
        net = _WinogradHead()
    x = rng.standard_normal((5, 64, 32, 32)).astype(np.float32)
    module, lowered, plan, layers = _with_and_without_head(net, x, monkeypatch)
    assert plan.sliced and plan.head == 2 and "wt6x6" in plan.algorithms.values()
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(layers(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lowered(x)), np.asarray(module(x)), rtol=1e-4, atol=1e-4)


class _Outputs(nn.Module):
    """A depthwise layer's activated map returned twice and read on by a 1x1 layer, whose
    output is returned too."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(6, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.b = nn.Conv2d(8, 5, 1)
        self.act, self.act6 = nn.ReLU(), nn.ReLU6()

    def forward(self, x):
        d = self.act6(self.dw(self.act(self.a(x))))
        return d, self.b(d), d


@pytest.mark.parametrize("per_image, size", [("1", 9), ("0", 9), ("0", 32)])
def test_parts_of_a_batch_write_their_outputs_into_their_place(rng, monkeypatch, per_image, size):
    """Image by image (``LOWERKIT_NNPACK_PER_IMAGE=1``) or in slices (``=0``; at 32x32 the
    slice of two images runs every step in its head, image by image), a step whose output the
    call returns writes it straight into its rows of the joined result (made at once: the
    outputs' types are static); an output returned twice is copied into its own array. Every
    call returns fresh arrays with the reference's values."""
    import lowerkit_nnpack.plan as plan_module
    from lowerkit_nnpack.spares import Spares
    from tests.team_calls import team_on_small_layers

    from lowerkit.backend.cpu import cpu_count

    team_on_small_layers(monkeypatch)
    if cpu_count() < 2:
        pytest.skip("one core: plans run serially")
    monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", per_image)  # no trial of the other form
    copied, in_place, taken = [], [], []

    class Counting(plan_module._Joined):
        def put(self, rows, outputs, placed=()):
            for i, out in enumerate(outputs):
                (in_place if i < len(placed) and out is placed[i] else copied).append(i)
            super().put(rows, outputs, placed)

    take = Spares.take
    monkeypatch.setattr(plan_module, "_Joined", Counting)
    monkeypatch.setattr(Spares, "take", lambda self, shape: taken.append(take(self, shape)) or taken[-1])
    with nn.init_seed(0):
        net = _Outputs()
    x = rng.standard_normal((3, 6, size, size)).astype(np.float32)
    module = lowerkit.trace(net, x)
    lowered = lowerkit.to_backend(module, "nnpack", {"forward": {"threads": 2}})
    (plan,) = _plans(lowered)
    assert plan.form_trial is None and (plan.per_image if per_image == "1" else plan.sliced)
    assert (plan.head == len(plan.steps)) == (size == 32)
    parts = 3 if per_image == "1" else 2  # images, or slices of 2 and 1
    writes = 2 * (3 if per_image == "1" or size == 32 else 2)  # two maps per image, or per slice
    expected = [np.asarray(e) for e in module(x)]
    earlier = None
    for _ in range(3):  # the spares plan their arena after the first call
        copied.clear()
        in_place.clear()
        taken.clear()
        got = [np.asarray(g) for g in lowered(x)]
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        assert sorted(in_place) == [0] * parts + [1] * parts and copied == [2] * parts
        # the two maps were written where they are returned (by each image's step in a head)
        assert sum(np.shares_memory(t, got[0]) or np.shares_memory(t, got[1]) for t in taken) == writes
        if earlier is not None:  # a later call leaves an earlier call's results alone
            for g, e in zip(earlier, kept):
                np.testing.assert_array_equal(g, e)
        earlier, kept = got, [g.copy() for g in got]
