"""The surface a user touches, through the installed ``lowerkit`` command: outputs by name,
casting, benchmarking, drawing, and no traceback from plausible mistakes."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import lowerkit as lk
from lowerkit import models
from tests.mixed_cnn import mixed_cnn, small_regions  # noqa: F401 (a fixture)

X = np.arange(6, dtype=np.float32).reshape(2, 3)
H = np.ones((2, 3), np.float32)


@pytest.fixture
def named_file(tmp_path):
    """A two-output module with named outputs, its inputs as .npy files."""
    module = lk.trace(lambda x, h: {"total": x + h, "diff": x - h}, X, H)
    lk.save(module, tmp_path / "named.lkm")
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "h.npy", H)
    np.save(tmp_path / "x64.npy", X.astype(np.float64))
    return tmp_path / "named.lkm"


pytestmark = pytest.mark.usefixtures("small_regions")


@pytest.fixture
def cnn_file(tmp_path):
    x = models.example_input("small_cnn")
    module = lk.trace(mixed_cnn(), x)
    lk.save(module, tmp_path / "cnn.lkm")
    np.save(tmp_path / "cnn_x.npy", x)
    return tmp_path / "cnn.lkm", module(x)


def test_run_writes_npz_keys_by_output_name(cli, named_file, tmp_path):
    out = cli("run", "named.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "-o", "y.npz")
    assert out.returncode == 0, out.stderr
    assert "total: float32[2, 3]" in out.stdout and "diff: float32[2, 3]" in out.stdout
    with np.load(tmp_path / "y.npz", allow_pickle=False) as saved:
        assert sorted(saved.files) == ["diff", "total"]
        np.testing.assert_array_equal(saved["total"], X + H)
        np.testing.assert_array_equal(saved["diff"], X - H)


def test_run_writes_npy_for_one_output_that_run_reads_back(cli, named_file, tmp_path):
    out = cli("run", "named.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "--output-name", "diff", "-o", "d.npy")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy", allow_pickle=False), X - H)
    out = cli("run", "named.lkm", "--input", "x=d.npy", "--input", "h=h.npy", "-o", "again.npz")
    assert out.returncode == 0, out.stderr  # the .npy written is a valid --input
    out = cli("run", "named.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "-o", "both.npy")
    assert out.returncode == 1 and "pick one with --output-name NAME" in out.stderr
    assert not (tmp_path / "both.npy").exists()


def test_run_casts_other_float_types_only_when_asked(cli, named_file):
    out = cli("run", "named.lkm", "--input", "x=x64.npy", "--input", "h=h.npy")
    assert out.returncode == 1 and "add --cast to convert it to f32" in out.stderr
    out = cli("run", "named.lkm", "--input", "x=x64.npy", "--input", "h=h.npy", "--cast")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "named.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "-o", os.devnull), None),
        (("demo", "--repeats", "0"), "--repeats expects a positive number"),
        (("bench", "named.lkm", "--repeats", "0"), "--repeats expects a positive number"),
        (("bench", "named.lkm", "--warmup", "-1"), "--warmup expects a number of runs >= 0"),
        (("bench", "named.lkm", "--batch", "4"), "--batch 4: method 'forward' has no free batch dimension"),
        (("run", "named.lkm", "--method", "nope"), "--method nope: the module has no such method"),
        (("run", "named.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "--output-name", "zz"),
         "--output-name zz: method 'forward' has outputs ['total', 'diff']"),
        (("lower", "named.lkm", "-b", "glowlike", "-o", "o.lkm"), "did you mean 'glow_like'?"),
        (("inspect", "missing.lkm", "--dot"), "missing.lkm: No such file or directory"),
        (("backends", "--timeout", "0"), "--timeout expects a positive number"),
    ],
)
def test_plausible_mistakes_give_one_line_and_no_traceback(cli, named_file, args, message):
    out = cli(*args)
    assert "Traceback" not in out.stderr
    if message is None:
        assert out.returncode == 0, out.stderr
    else:
        assert out.returncode == 1, out.stdout
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert message in out.stderr


def test_debug_works_anywhere_on_the_line(cli, named_file):
    for args in (("--debug", "run", "named.lkm"), ("run", "named.lkm", "--debug"), ("run", "--debug", "named.lkm")):
        out = cli(*args)
        assert out.returncode == 1 and "Traceback" in out.stderr and "InputError" in out.stderr


def test_lower_report_for_one_backend_fails_before_writing_anything(cli, named_file, tmp_path):
    out = cli("lower", "named.lkm", "-b", "reference", "-o", "o.lkm", "--report")
    assert out.returncode == 1 and "give several backends (-b A,B)" in out.stderr
    assert not (tmp_path / "o.lkm").exists()


def test_onnx_errors_speak_in_flags(cli, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        # A free leading (batch) dim stays symbolic; a symbolic dim elsewhere must be pinned.
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "width"])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "r.onnx"))
    out = cli("lower", "r.onnx", "-b", "reference", "-o", "r.lkm")
    assert out.returncode == 1 and "--input-shape NAME=D,D,..." in out.stderr and "input_shapes=" not in out.stderr


def test_bench_json_has_percentiles_throughput_and_a_profile(cli, cnn_file):
    pytest.importorskip("lowerkit_nnpack")
    out = cli("bench", "cnn.lkm", "-b", "nnpack,reference", "--repeats", "4", "--warmup", "1", "--profile", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    lat = result["latency_ms"]
    assert result["repeats"] == 4 and result["batch"] == 1 and result["backend"] == ["nnpack", "reference"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert result["throughput_per_s"] > 0
    assert set(result["profile_ms"]["backends"]) == {"nnpack", "reference"}
    assert all(name.startswith("forward_region") for name in result["profile_ms"]["regions"])


def test_bench_text_with_file_inputs_and_time_budget(cli, cnn_file):
    out = cli("bench", "cnn.lkm", "--input", "x=cnn_x.npy", "--time", "0.2", "--warmup", "0")
    assert out.returncode == 0, out.stderr
    assert "latency ms: min" in out.stdout and "p99" in out.stdout and "samples/s" in out.stdout


def test_bench_api_on_random_and_given_inputs(cnn_file):
    path, _ = cnn_file
    result = lk.bench(str(path), repeats=3, warmup=0)
    assert result.repeats == 3 and result.batch == 1 and result.method == "forward"
    given = lk.bench(lk.load(path), {"x": models.example_input("small_cnn")}, repeats=2)
    assert given.repeats == 2 and given.as_dict()["latency_ms"]["p50"] > 0
    with pytest.raises(lk.InputError, match="--repeats or --time, not both"):
        lk.bench(lk.load(path), repeats=2, seconds=1.0)


def test_random_inputs_fill_free_dims_with_the_batch():
    from lowerkit.cli.bench import free_dims, random_inputs
    from lowerkit.ir import TensorType
    from lowerkit.ir.module import Signature

    class Free:  # a stand-in for a symbolic dim until modules carry them
        def __repr__(self) -> str:
            return "N"

    sig = Signature((("x", TensorType("f32", (1, 3))),), (TensorType("f32", (1, 3)),))
    assert free_dims(sig) == []
    symbolic = Signature((("x", type("T", (), {"shape": (Free(), 3), "numpy_dtype": np.float32})()),), ())
    assert free_dims(symbolic) == [("x", 0)]
    assert random_inputs(symbolic, batch=5)["x"].shape == (5, 3)


def test_inspect_svg_renders_with_graphviz_or_says_it_is_missing(cli, cnn_file, tmp_path):
    out = cli("inspect", "cnn.lkm", "--svg", "g.svg")
    if shutil.which("dot") is None:
        assert out.returncode == 1, out.stdout
        assert "--svg needs Graphviz's `dot` on the PATH" in out.stderr and "Traceback" not in out.stderr
    else:
        assert out.returncode == 0, out.stderr
        assert "<svg" in (tmp_path / "g.svg").read_text()


def test_demo_json_keep_and_no_leftovers(cli, tmp_path):
    import tempfile

    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("lowerkit-demo-")}
    out = cli("demo", "--model", "small_cnn", "--repeats", "2", "--json", env={"TMPDIR": tempfile.gettempdir()})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] and result["plans"] and result["files"] is None
    for plan in result["plans"]:
        assert plan["matches"] and plan["run_ms"]["min"] <= plan["run_ms"]["median"] <= plan["run_ms"]["max"]
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("lowerkit-demo-")}
    assert after <= before, f"the demo left {after - before}"
    out = cli("demo", "--model", "small_cnn", "--repeats", "1", "--keep", "kept")
    assert out.returncode == 0, out.stderr
    assert "smallcnn.reference.lkm" in os.listdir(tmp_path / "kept") and "ms ±" in out.stdout


def test_quiet_and_progress_switches():
    import io

    from lowerkit import progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress.enabled(Tty()) and not progress.enabled(io.StringIO())
    progress.set_quiet(True)
    try:
        assert not progress.enabled(Tty())
    finally:
        progress.set_quiet(False)
    with progress.progress(3, "x", show=False) as bar:  # a do-nothing line still counts
        bar.update()


def test_a_disabled_backend_is_not_called_missing(cli, named_file, tmp_path):
    lk.save(lk.to_backend(lk.load(named_file), "reference"), tmp_path / "ref.lkm")
    env = {"LOWERKIT_DISABLE_PLUGINS": "reference"}
    out = cli("run", "ref.lkm", "--input", "x=x.npy", "--input", "h=h.npy", env=env)
    assert out.returncode == 1 and "remove 'reference' from LOWERKIT_DISABLE_PLUGINS" in out.stderr
    assert "install" not in out.stderr
    out = cli("inspect", "ref.lkm", env=env)
    assert out.returncode == 0 and "installed here but disabled by LOWERKIT_DISABLE_PLUGINS" in out.stdout
