"""A plan's linear layers on constant weights (``lowerkit_nnpack.linear_step``): the activation
after one fused, a flatten only it reads folded into it, the pool before it and the layer
bound — the same results as the reference on one thread and on a team, for one row, a few
and many."""

from __future__ import annotations

import numpy as np
import pytest
from tests.team_calls import team_on_small_layers

import lowerkit
from lowerkit import nn, ops


class _Classifier(nn.Module):
    """conv -> global pool -> flatten(``start``) -> linear -> ``act`` -> linear: a model's head."""

    def __init__(self, start: int = 1, act: str = "hardswish") -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 1)
        self.fc1, self.fc2 = nn.Linear(16, 40), nn.Linear(40, 10)
        self.start, self.act = start, act

    def forward(self, x):
        pooled = ops.global_avg_pool2d(ops.relu(self.conv(x)))
        hidden = getattr(ops, self.act)(self.fc1(ops.flatten(pooled, self.start)))
        return self.fc2(hidden)


class _Tokens(nn.Module):
    """conv -> flatten(2) -> linear over the pixels -> gelu -> linear: rows per image = channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 24, 1)
        self.fc1, self.fc2 = nn.Linear(36, 48), nn.Linear(48, 12)

    def forward(self, x):
        return self.fc2(ops.gelu(self.fc1(ops.flatten(ops.relu(self.conv(x)), 2))))


def _plan(lowered):
    from lowerkit_nnpack.plan import Plan

    (plan,) = [h.plan for h in lowered._handles.values() if isinstance(getattr(h, "plan", None), Plan)]
    return plan


def _lowered(net, x, threads: int):
    with nn.init_seed(0):
        module = lowerkit.trace(net(), x)
    return module, lowerkit.to_backend(module, "nnpack", {"forward": {"threads": threads}})


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch", [1, 4])  # one row (the team's packed bands, or gemv), a few (the bands)
def test_a_classifier_fuses_folds_and_binds(monkeypatch, rng, threads, batch):
    if threads > 1:
        team_on_small_layers(monkeypatch)
    x = rng.standard_normal((batch, 8, 6, 6)).astype(np.float32)
    module, lowered = _lowered(_Classifier, x, threads)
    plan = _plan(lowered)
    ops_run = [step.node.op for step in plan.steps]
    assert "flatten" not in ops_run and "hardswish" not in ops_run, ops_run  # folded, fused
    expected = module(x)
    for _ in range(4):  # recorded, on the arena, bound, replayed
        np.testing.assert_allclose(lowered(x), expected, rtol=1e-4, atol=1e-5)
    if plan.sliced or plan.per_image:
        return  # batch slices and images run their own spares: the binding is checked on one image
    (first,) = [s for s in plan.steps if s.node.op == "linear" and s.fills]
    entry = plan._local.spares.bound[first.key]
    assert entry.call is not None  # the first linear layer (its output is no call output) binds


class _Merged(nn.Module):
    """conv -> flatten(2) -> flatten(0, 1) -> linear: the second flatten merges the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 1)
        self.fc = nn.Linear(36, 12)

    def forward(self, x):
        return self.fc(ops.flatten(ops.flatten(ops.relu(self.conv(x)), 2), 0, 1))


def test_a_flatten_that_merges_the_batch_stays_a_step(rng):
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    module, lowered = _lowered(_Merged, x, 1)
    assert [step.node.op for step in _plan(lowered).steps].count("flatten") == 2
    for _ in range(3):
        np.testing.assert_allclose(lowered(x), module(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_many_rows_with_a_fused_gelu(monkeypatch, rng, threads):
    if threads > 1:
        team_on_small_layers(monkeypatch)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    module, lowered = _lowered(_Tokens, x, threads)
    ops_run = [step.node.op for step in _plan(lowered).steps]
    assert ops_run == ["conv2d", "linear", "linear"], ops_run  # flatten folded, relu and gelu fused
    expected = module(x)
    for _ in range(4):
        np.testing.assert_allclose(lowered(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 4, 32])  # a row (bands on the team), a few (bands), many (row panels)
@pytest.mark.parametrize("teamed", [False, True])
def test_a_step_called_alone_makes_its_own_output(monkeypatch, rng, rows, teamed):
    """The form a plan runs where it cannot pin the output's shape ahead: the same paths into a
    new array; a wrong feature count is the layer's error."""
    from lowerkit.backend.cpu import make_team
    from lowerkit_nnpack.activations import NONE
    from lowerkit_nnpack.geometry import GeometryError
    from lowerkit_nnpack.layers import Linear
    from lowerkit_nnpack.linear_step import LinearStep

    team = None
    if teamed:
        team_on_small_layers(monkeypatch)
        team = make_team(2)
    w = rng.standard_normal((300, 280)).astype(np.float32)  # 84k weights: the team's bands
    b = rng.standard_normal(300).astype(np.float32)
    step = LinearStep(Linear(w, b), NONE, None, team)
    x = rng.standard_normal((rows, 280)).astype(np.float32)
    np.testing.assert_allclose(step(x), x @ w.T + b, rtol=1e-4, atol=1e-4)
    with pytest.raises(GeometryError, match="280 features"):
        step(x[:, :100])
    with pytest.raises(ValueError, match="without its output's shape"):
        step.output_shape(1)


def test_many_rows_share_the_few_row_packing_where_the_widths_agree():
    """Linear.row_bands is Linear.bands where jit.panel.FC_WIDTH is 16 (one packing, not two),
    else a packing of its own, FC_WIDTH columns wide; both multiply like numpy."""
    from lowerkit.backend.cpu import jit
    from lowerkit_nnpack.layers import Linear

    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((70, 40)).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    layer = Linear(w, b)
    rows = layer.row_bands()
    width = jit.load("panel").FC_WIDTH
    assert rows.width == width and (rows is layer.bands()) == (width == 16)
    x = rng.standard_normal((13, 40)).astype(np.float32)
    out = np.empty((13, 70), np.float32)
    rows.run_rows(x, out, (0, 0.0, 0.0))
    np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-4, atol=1e-4)
