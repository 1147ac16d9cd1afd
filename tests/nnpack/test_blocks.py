"""Inverted-residual blocks as one step (lowerkit_nnpack.blocks, lowerkit.backend.cpu.mbconv):
which nodes the plan folds into a block's step, and that the step computes what the layers
compute — on a team, in batch slices, on one thread, bound and unbound."""

from __future__ import annotations

import numpy as np
import pytest
from tests.nnpack.test_batch_slices import _plans
from tests.team_calls import check_from_threads, record_team_calls, rows_kernel, team_on_small_layers

import lowerkit as lk
from lowerkit import models
from lowerkit.backend.cpu import mbconv as bands
from lowerkit.backend.cpu.team import team_off
from lowerkit_nnpack import blocks

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    team_on_small_layers(monkeypatch)
    rows_kernel(monkeypatch, True)  # the blocks' depthwise kernel, on every machine
    monkeypatch.setattr(bands, "MIN_ROWS", 4)  # the small model's 16x16 and 8x8 maps ...
    monkeypatch.setattr(bands, "BAND", 3)  # ... in several bands


def _model(batch: int):
    x = models.example_input("mobilenet_v2", batch=batch, small=True)
    return lk.trace(models.get("mobilenet_v2", small=True), x), x


def _plan(lowered):
    (plan,) = _plans(lowered)
    return plan


def _block_steps(plan) -> list:
    return [step for step in plan.steps if plan.algorithms.get(step.node.debug_handle) == "inverted_residual_block"]


def test_a_block_is_one_step():
    module, _ = _model(1)
    plan = _plan(lk.to_backend(module, ["nnpack"]))  # batch norms folded first (a partition's passes)
    steps = _block_steps(plan)
    assert len(steps) >= 3
    graph = module.methods["forward"].graph
    depthwise = [n for n in graph.nodes if n.op == "conv2d" and n.attrs["groups"] > 1]
    for step in steps:  # the expansion's step reads the block's input, writes its last value
        assert step.node.op == "conv2d" and step.inputs[0] is step.node.inputs[0]
    depthwise_steps = [step for step in plan.steps if step.node.op == "conv2d" and step.node.attrs["groups"] > 1]
    assert len(depthwise_steps) == len(depthwise) - len(steps)  # each block's depthwise layer: no step


def test_no_block_steps_when_switched_off(monkeypatch):
    module, _ = _model(1)
    monkeypatch.setenv(blocks.BLOCKS_ENV, "0")
    assert _block_steps(_plan(lk.to_backend(module, ["nnpack"]))) == []
    monkeypatch.delenv(blocks.BLOCKS_ENV)
    rows_kernel(monkeypatch, False)
    assert _block_steps(_plan(lk.to_backend(module, ["nnpack"]))) == []


@pytest.mark.parametrize("batch, per_image", [(1, None), (3, "1"), (3, "0")])
def test_block_steps_compute_what_the_layers_compute(monkeypatch, batch, per_image):
    """One image on the team, a batch image by image on the team, a batch in slices: the
    reference's outputs, and those of the plan without blocks, over repeated calls."""
    if per_image is not None:
        monkeypatch.setenv("LOWERKIT_NNPACK_PER_IMAGE", per_image)
    module, x = _model(batch)
    ran = record_team_calls(monkeypatch)
    lowered = lk.to_backend(module, ["nnpack"])
    monkeypatch.setenv(blocks.BLOCKS_ENV, "0")
    layers = lk.to_backend(module, ["nnpack"])
    expected = np.asarray(module(x))
    scale = max(1.0, float(np.abs(expected).max()))
    for _ in range(3):  # the second call binds the steps' arrays, the third runs the bound calls
        got = np.asarray(lowered(x))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * scale)
        np.testing.assert_allclose(got, np.asarray(layers(x)), rtol=0, atol=1e-5 * scale)
    plan = _plan(lowered)
    if plan.team is not None and per_image != "0":
        assert "mbconv_rows" in ran
    with team_off():  # the serial form, as a slice of a batch on a worker runs it
        (serial,) = plan._run([x])
    np.testing.assert_allclose(serial, expected, rtol=0, atol=1e-4 * scale)


def test_block_steps_from_eight_threads():
    """Each thread binds its own block steps (its own band buffers): eight threads at once get
    each their own input's result."""
    module, x = _model(1)
    lowered = lk.to_backend(module, ["nnpack"])
    assert _block_steps(_plan(lowered))
    check_from_threads(lowered, module, x, calls=3)
