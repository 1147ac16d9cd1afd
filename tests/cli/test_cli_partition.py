"""``lowerkit lower`` over several backends: --report, --json, --submodules; ``inspect --dot``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from tests.mixed_cnn import mixed_cnn, small_regions  # noqa: F401 (a fixture)

pytest.importorskip("lowerkit_nnpack")
pytest.importorskip("lowerkit_glow_like")


pytestmark = pytest.mark.usefixtures("small_regions")


@pytest.fixture
def cnn_file(tmp_path):
    x = models.example_input("small_cnn")
    module = lk.trace(mixed_cnn(), x)
    lk.save(module, tmp_path / "m.lkm")
    np.save(tmp_path / "x.npy", x)
    return tmp_path / "m.lkm", module(x)


def test_lower_report_json_and_dot(cli, cnn_file, tmp_path):
    path, expected = cnn_file
    out = cli("lower", str(path), "-b", "nnpack,glow_like,reference", "--report", "-o", "out.lkm")
    assert out.returncode == 0, out.stderr
    assert "forward_region1        glow_like" in out.stdout
    # The batch norm was folded into the convolution before partitioning.
    assert "passes before partitioning: fold_batch_norm" in out.stdout
    assert "nnpack: op 'avg_pool2d' is not in NNPACK's layer set" in out.stdout

    out = cli("lower", str(path), "-b", "nnpack,glow_like,reference", "--json", "-o", "out.lkm")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["backends"] == ["nnpack", "glow_like", "reference"]
    assert [r["backend"] for r in report["regions"]] == ["nnpack", "glow_like", "nnpack"]

    out = cli("inspect", "out.lkm", "--dot")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('digraph "MixedCNN" {') and out.stdout.count("subgraph \"cluster_") == 3
    assert '"forward:in:x"' in out.stdout and '"forward:out:output0"' in out.stdout

    out = cli("run", "out.lkm", "--input", f"x={tmp_path / 'x.npy'}", "-o", "y.npz")
    assert out.returncode == 0, out.stderr
    with np.load(tmp_path / "y.npz", allow_pickle=False) as y:
        np.testing.assert_allclose(y["output0"], expected, rtol=1e-5, atol=1e-6)


def test_selective_lowering_from_the_command_line(cli, cnn_file):
    path, _ = cnn_file
    out = cli("lower", str(path), "-b", "nnpack", "--submodules", "conv,fc", "--json", "-o", "sel.lkm")
    assert out.returncode == 0, out.stderr
    taken = {n["op"]: n["backend"] for n in json.loads(out.stdout)["nodes"]}
    assert taken == {"conv2d": "nnpack", "batch_norm": None, "relu": None, "avg_pool2d": None,
                     "max_pool2d": None, "add": None, "flatten": None, "linear": "nnpack"}


def test_dot_draws_plain_and_single_backend_files_too(cli, cnn_file, tmp_path):
    path, _ = cnn_file
    module = lk.load(path)
    lk.save(lk.to_backend(module, "glow_like"), tmp_path / "g.lkm")
    lk.save(lk.to_backend(module, "glow_like", keep_source=True), tmp_path / "gk.lkm")
    ops = [n.op for n in lk.graph_of(module).nodes]
    plain = cli("inspect", str(path), "--dot")
    assert plain.returncode == 0, plain.stderr
    assert '"forward:in:x"' in plain.stdout and '"forward:out:output0"' in plain.stdout
    assert all(f'label="{op}' in plain.stdout for op in ops) and "cluster_" not in plain.stdout
    kept = cli("inspect", "gk.lkm", "--dot")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.count('subgraph "cluster_') == 1 and all(f'label="{op}' in kept.stdout for op in ops)
    whole = cli("inspect", "g.lkm", "--dot")
    assert whole.returncode == 0, whole.stderr
    assert 'label="glow_like\\nforward' in whole.stdout and '"forward:in:x" -> "forward:glow_like"' in whole.stdout


def test_inspect_shows_what_the_backend_says_about_its_payload(cli, cnn_file, tmp_path):
    path, _ = cnn_file
    lk.save(lk.to_backend(lk.load(path), "glow_like"), tmp_path / "g.lkm")
    out = cli("inspect", "g.lkm")
    assert out.returncode == 0, out.stderr
    assert "described by the backend:" in out.stdout
    for line in ("planned peak activation bytes", "sum of all activations (no reuse)", "liveness lower bound"):
        assert line in out.stdout
    assert "glow.conv2d" in out.stdout  # the instruction list
