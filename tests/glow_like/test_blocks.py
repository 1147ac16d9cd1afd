"""Inverted-residual blocks bound as one call (kernels.mbconv, lowerkit.backend.cpu.mbconv):
which runs of three instructions the runtime binds so, and that the blocks compute what the
layers compute — on a team, image by image, in batch slices, on one thread."""

from __future__ import annotations

import numpy as np
import pytest
from tests.glow_like.helpers import assert_close, peak_call_bytes
from tests.team_calls import from_threads, record_team_calls, rows_kernel, team_on_small_layers

import lowerkit as lk
import lowerkit_glow_like as glow
from lowerkit import models
from lowerkit.backend.cpu import mbconv as bands
from lowerkit_glow_like.kernels import mbconv

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _team(monkeypatch):
    team_on_small_layers(monkeypatch)
    rows_kernel(monkeypatch, True)  # the blocks' depthwise kernel, on every machine
    # the small model's maps (16x16 and smaller) in several bands: blocks from 4 output rows,
    # bands of 3 (a team of two then splits an 8-row map 3 + 5)
    monkeypatch.setattr(bands, "MIN_ROWS", 4)
    monkeypatch.setattr(bands, "BAND", 3)


def _handle(module, **options):
    payload = glow.lowerkit_preprocess(module=module, compile_spec={"forward": options})
    return glow.lowerkit_compile(processed=payload, compile_spec={"forward": options})["forward"]


def _model(batch: int):
    x = models.example_input("mobilenet_v2", batch=batch, small=True)
    return lk.trace(models.get("mobilenet_v2", small=True), x), x


def _block_starts(handle) -> list[int]:
    return mbconv.blocks(handle.program)


def test_the_blocks_of_mobilenet_v2():
    """Every expansion -> depthwise -> projection run on maps of at least MIN_ROWS rows, with
    and without a residual add, at stride 1 and 2."""
    module, _ = _model(1)
    handle = _handle(module, threads=2)
    program = handle.program
    starts = _block_starts(handle)
    assert len(starts) >= 3
    for i in starts:
        expand, depthwise, project = program.instructions[i:i + 3]
        assert program.buffers[depthwise.outputs[0]].shape[2] >= bands.MIN_ROWS
        assert int(depthwise.attrs["groups"]) == program.buffers[depthwise.inputs[0]].shape[1]
    strides = {tuple(program.instructions[i + 1].attrs["stride"]) for i in starts}
    residuals = {bool(program.instructions[i + 2].attrs.get("residual")) for i in starts}
    assert strides == {(1, 1), (2, 2)} and residuals == {True, False}


def test_blocks_off_where_the_row_kernel_is_not_chosen(monkeypatch):
    module, _ = _model(1)
    rows_kernel(monkeypatch, False)
    assert _block_starts(_handle(module, threads=2)) == []
    rows_kernel(monkeypatch, True)
    monkeypatch.setenv(mbconv.BLOCKS_ENV, "0")
    assert _block_starts(_handle(module, threads=2)) == []


@pytest.mark.parametrize("batch, threads, env", [(1, 2, {}), (3, 2, {}), (3, 2, {"LOWERKIT_GLOW_PER_IMAGE": "0"}),
                                                  (2, 1, {})])
def test_blocks_compute_what_the_layers_compute(monkeypatch, batch, threads, env):
    """A team (one image), image by image on the team, batch slices, one thread: the same
    outputs with the blocks bound as one call as with every instruction on its own, and the
    reference's, over repeated calls."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    module, x = _model(batch)
    ran = record_team_calls(monkeypatch)
    blocks = _handle(module, threads=threads)
    monkeypatch.setenv(mbconv.BLOCKS_ENV, "0")
    layers = _handle(module, threads=threads)
    expected = np.asarray(module.run("forward", x))
    for _ in range(3):
        (got,) = blocks.run([x])
        (plain,) = layers.run([x])
        assert_close([got], [expected], rtol=1e-4)
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
    if threads > 1 and env.get("LOWERKIT_GLOW_PER_IMAGE") != "0":
        assert "mbconv_rows" in ran  # the team form ran


def test_a_block_whose_output_would_overwrite_its_input_is_not_bound():
    """Where the memory plan gives the block's output its input's bytes (the input dies with
    the expansion), the block would overwrite input rows it has yet to read: those three
    instructions stay apart."""
    module, _ = _model(1)
    program = _handle(module, threads=1).program
    starts = mbconv.blocks(program)
    i = starts[0]
    x, out = program.instructions[i].inputs[0], program.instructions[i + 2].outputs[0]
    root = program.buffers[program.buffers[out].root]
    saved = root.offset
    root.offset = program.buffers[program.buffers[x].root].offset
    try:
        assert i not in mbconv.blocks(program)
    finally:
        root.offset = saved


@pytest.mark.parametrize("batch", [1, 3])
def test_blocks_from_eight_threads_allocate_only_the_output(batch):
    """Each thread binds its own blocks (its own band buffers): eight threads at once get each
    their own input's result; steady-state calls allocate only their output."""
    module, x = _model(batch)
    handle = _handle(module, threads=2)
    assert _block_starts(handle)
    inputs = [x + np.float32(0.1 * i) for i in range(8)]
    expected = [np.asarray(module.run("forward", xi)) for xi in inputs]
    results = from_threads(lambda i: [handle.run([inputs[i]])[0] for _ in range(3)])
    for i in range(8):
        for got in results[i]:
            assert_close([got], [expected[i]], rtol=1e-4)
    for _ in range(12):  # past any trial of image by image against slices
        (out,) = handle.run([x])
    peak = peak_call_bytes(handle, x)
    assert peak < out.nbytes + 128 * 1024, f"a call allocated {peak} bytes (output {out.nbytes})"
