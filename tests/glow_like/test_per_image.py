"""Image by image on the team: a batch-sliceable program with depthwise layers runs its batch
one image at a time through the whole program, each image's layers as team regions, in one
image's rows of the arena (runtime.Executable._image_by_image). Which programs take it, and
that it computes what the whole program and the reference compute — over repeated calls,
from 8 threads — allocating only its outputs. Where the batch could run as slices too, both
forms are bound and the first calls choose (FormTrial): both compute the same, and the
loser's memory goes."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, peak_call_bytes
from tests.team_calls import from_threads, record_team_calls, team_on_small_layers

import lowerkit as lk
import lowerkit_glow_like as glow
from lowerkit import models
from lowerkit.backend.cpu import FormTrial

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _team(monkeypatch):
    team_on_small_layers(monkeypatch)


def _handle(module, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    return glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})["forward"]


def _model(name: str, batch: int):
    x = models.example_input(name, batch=batch, small=True)
    return lk.trace(models.get(name, small=True), x), x


def test_which_programs_run_image_by_image(monkeypatch):
    mobile, _ = _model("mobilenet_v2", 3)
    handle = _handle(mobile, threads=2)  # 3 images, 2 workers: slices could run too
    assert handle.per_image and handle.team is not None and handle.batch_slices is not None
    assert handle.form_trial is not None and handle.form_trial.choice is None
    two = _handle(_model("mobilenet_v2", 2)[0], threads=3)  # fewer images than workers: no slices
    assert two.per_image and two.batch_slices is None and two.form_trial is None
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "1")
    forced = _handle(mobile, threads=2)
    assert forced.per_image and forced.batch_slices is None and forced.form_trial is None
    monkeypatch.delenv("LOWERKIT_GLOW_PER_IMAGE")
    assert not _handle(mobile, threads=1).per_image  # one thread: nothing to share an image with
    assert not _handle(_model("mobilenet_v2", 1)[0], threads=2).per_image  # one image: plain team mode
    resnet = _handle(_model("resnet18", 3)[0], threads=2)  # no depthwise layer: slices
    assert not resnet.per_image and resnet.batch_slices is not None
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "0")
    off = _handle(mobile, threads=2)
    assert not off.per_image and off.batch_slices is not None and off.form_trial is None


def test_the_first_calls_choose_between_images_and_slices(monkeypatch):
    """Both forms run, in pairs of calls, and agree with the whole program; the trial then settles
    and each thread drops the other form's calls and memory."""
    module, x = _model("mobilenet_v2", 3)
    handle = _handle(module, threads=2)
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "0")
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    (expected,) = _handle(module, threads=1).run([x])
    trial = handle.form_trial
    forms = []
    while trial.choice is None:
        forms.append(trial.form())
        (got,) = handle.run([x])
        assert_close([got], [expected], rtol=1e-5)
    # in pairs: 0, 1 1, 0 0, ... (the compile's dry run was the first call of form 0), for one
    # round, or more where the two medians were within FormTrial.MARGIN
    assert forms[:trial.CALLS - 1] == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1][1:]
    assert forms == [(call + 1) // 2 % 2 for call in range(1, len(forms) + 1)]
    assert len(forms) in {trial.CALLS - 1 + rounds * trial.ROUND_CALLS for rounds in range(trial.ROUNDS)}
    assert trial.choice == (0 if trial.scores[0] <= trial.scores[1] else 1)
    (got,) = handle.run([x])
    assert_close([got], [expected], rtol=1e-5)
    state = handle._state()
    assert (state.image is None) != (state.slices is None)
    assert (state.image is not None) == (trial.choice == 0)


@pytest.mark.parametrize("name", ["mobilenet_v2", "efficientnet_b0"])
def test_images_match_the_whole_program_and_the_reference(name, monkeypatch):
    module, x = _model(name, 3)
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "1")
    handle = _handle(module, threads=2)
    assert handle.per_image
    ran = record_team_calls(monkeypatch)
    (got,) = handle.run([x])
    assert ran  # each image's layers ran as team regions
    monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", "0")
    monkeypatch.setenv("LOWERKIT_GLOW_SPLIT_BATCH", "0")
    whole = _handle(module, threads=1)
    (expected,) = whole.run([x])
    for _ in range(3):
        (got,) = handle.run([x])
        assert_close([got], [expected], rtol=1e-5)
    assert_close([got], [np.asarray(module(x))], rtol=1e-4)


def test_eight_threads_share_one_image_by_image_handle():
    module, x = _model("mobilenet_v2", 3)
    handle = _handle(module, threads=2)
    assert handle.per_image
    inputs = [x + np.float32(0.1 * i) for i in range(8)]
    expected = [handle.run([xi])[0] for xi in inputs]
    results = from_threads(lambda i: [handle.run([inputs[i]])[0] for _ in range(3)])
    for i in range(8):
        for got in results[i]:
            # Not bit for bit: 8 threads on 2 cores stall the team, and the stall guard then
            # runs the serial forms (numpy's BLAS where the team's GEMMs are MKL's).
            assert_close([got], [expected[i]], rtol=1e-5)


@pytest.mark.parametrize("per_image", ["1", None])
def test_image_by_image_calls_allocate_only_their_outputs(per_image, monkeypatch):
    """Image by image alone, and after a trial (whichever form won)."""
    if per_image:
        monkeypatch.setenv("LOWERKIT_GLOW_PER_IMAGE", per_image)
    module, x = _model("mobilenet_v2", 4)
    handle = _handle(module, threads=2)
    assert handle.per_image
    (out,) = handle.run([x])  # binds this thread's arena and kernels
    for _ in range(FormTrial.ROUNDS * FormTrial.CALLS):  # the trial's every round
        handle.run([x])
    assert handle.form_trial is None or handle.form_trial.choice is not None
    peak = peak_call_bytes(handle, x)
    assert peak < out.nbytes + 128 * 1024, f"a call allocated {peak} bytes (output {out.nbytes})"
