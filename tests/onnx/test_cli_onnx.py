"""The CLI's ONNX path: lowerkit lower model.onnx ... then lowerkit run, against ONNX Runtime."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402

import lowerkit  # noqa: E402

from tests.onnx.onnx_helpers import make_model, rand, run_ort  # noqa: E402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lowerkit.cli", *args], capture_output=True, text=True)


@pytest.fixture
def onnx_file(tmp_path):
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["g"]),
         helper.make_node("Flatten", ["g"], ["y"])],
        [("x", ["batch", 3, 8, 8])], [("y", ["batch", 4])],
        {"w": rand(4, 3, 3, 3, seed=1), "b": rand(4, seed=2)},
    )
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return model, path


@pytest.mark.parametrize("backends", ["reference", "nnpack,glow_like"])
def test_lower_then_run_an_onnx_model(onnx_file, tmp_path, backends) -> None:
    installed = {b.name for b in lowerkit.backends(check=False) if not b.broken}
    missing = [b for b in backends.split(",") if b not in installed]
    if missing:
        pytest.skip(f"backend(s) {missing} not installed")
    model, path = onnx_file
    x = rand(2, 3, 8, 8, seed=3)
    np.save(tmp_path / "x.npy", x)
    lkm, out = tmp_path / "m.lkm", tmp_path / "y.npz"
    done = _cli("lower", str(path), "-b", backends, "--input-shape", "x=2,3,8,8", "-o", str(lkm))
    assert done.returncode == 0, done.stderr
    done = _cli("run", str(lkm), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(out))
    assert done.returncode == 0, done.stderr
    with np.load(out, allow_pickle=False) as saved:
        y = saved["y"]  # keyed by the ONNX output name
    np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_lower_keeps_a_symbolic_batch(onnx_file, tmp_path) -> None:
    model, path = onnx_file
    lkm = tmp_path / "m.lkm"
    done = _cli("lower", str(path), "-b", "reference", "-o", str(lkm))
    assert done.returncode == 0, done.stderr
    lowered = lowerkit.load(lkm)
    assert str(lowered.signature("forward")) == "(x: f32[batch, 3, 8, 8]) -> y: f32[batch, 4]"
    for batch in (1, 3):
        x = rand(batch, 3, 8, 8, seed=batch)
        np.testing.assert_allclose(lowered(x), run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
