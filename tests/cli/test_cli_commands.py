"""The ``lowerkit`` command line, run as a subprocess."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.ir import Graph, GraphMethod, Module, TensorType

T = TensorType("f32", (2, 3))


def _accum(tmp_path):
    g = Graph()
    x = g.add_input("x", T)
    h = g.add_input("h", T)
    a = g.add_node("add", [x, h], [T], debug_handle=1).output
    s = g.add_node("sub", [x, h], [T], debug_handle=2).output
    g.set_outputs([a, s])
    module = Module({}, {"forward": GraphMethod(g, returns_tuple=True)}, name="Accum")
    path = tmp_path / "accum.lkm"
    lk.save(module, path)
    x, h = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "h.npy", h)
    return path, x, h


def test_backends_json_lists_reference_with_distribution_and_version(cli):
    out = cli("backends", "--json")
    assert out.returncode == 0, out.stderr
    listed = {b["name"]: b for b in json.loads(out.stdout)}
    ref = listed["reference"]
    assert ref["distribution"] == "lowerkit-reference" and ref["version"]
    assert ref["available"] is True and ref["error"] is None
    assert set(ref) >= {"name", "distribution", "version", "available", "error", "note"}


def test_backends_table_shows_broken_and_unavailable_ones(cli):
    out = cli("backends", dists=True, env={"LOWERKIT_TOY_UNAVAILABLE": "1"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "AVAILABLE", "NOTE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["toy"].split()[:4] == ["toy", "lowerkit-test-toy", "1.0.0", "no"]
    assert "switched off by LOWERKIT_TOY_UNAVAILABLE" in rows["toy"]
    assert rows["broken_import"].split()[3] == "broken" and "ModuleNotFoundError" in rows["broken_import"]
    assert "lowerkit-test-dup-a" in rows["dup"] and "claimed by more than one distribution" in rows["dup"]
    assert rows["reference"].split()[3] == "yes"


def test_version_lists_backends_without_importing_them(cli):
    out = cli("--version", dists=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"lowerkit {lk.__version__}"
    assert "  toy 1.0.0 (lowerkit-test-toy)" in out.stdout.splitlines()


def test_lower_run_inspect_round_trip(cli, tmp_path):
    model, x, h = _accum(tmp_path)
    out = cli("lower", str(model), "-b", "toy", "-o", "low.lkm", "--spec", '{"forward": {"threads": 2}}', dists=True)
    assert out.returncode == 0, out.stderr
    assert "lowered" in out.stdout and (tmp_path / "low.lkm").exists()

    out = cli("run", "low.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "-o", "out.npz", dists=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("output0: float32[2, 3]")
    with np.load(tmp_path / "out.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["output0"], x + h)
        np.testing.assert_array_equal(saved["output1"], x - h)

    out = cli("inspect", "low.lkm", dists=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "lowerkit format 1." in text
    assert "backend: toy" in text and "made with: lowerkit-test-toy 1.0.0" in text
    assert 'compile spec: {"forward": {"threads": 2}}' in text
    assert "forward(x: f32[2, 3], h: f32[2, 3]) -> (f32[2, 3], f32[2, 3])" in text
    assert "payload:" in text and "original module: not kept" in text


def test_inspect_works_where_the_backend_is_missing(cli, tmp_path):
    model, _, _ = _accum(tmp_path)
    assert cli("lower", str(model), "-b", "toy", "-o", "low.lkm", "--keep-source", dists=True).returncode == 0
    out = cli("inspect", "low.lkm")  # no test distributions on the path now
    assert out.returncode == 0, out.stderr
    assert "not installed here (install lowerkit-test-toy)" in out.stdout
    assert "sub(%x, %h)" in out.stdout  # the kept original's IR
    out = cli("run", "low.lkm", "--input", "x=x.npy", "--input", "h=h.npy")
    assert out.returncode == 1
    assert out.stderr.startswith("lowerkit: error: no backend named 'toy' is installed")
    assert "install lowerkit-test-toy" in out.stderr and "Traceback" not in out.stderr
    out = cli("run", "low.lkm", "--input", "x=x.npy", "--input", "h=h.npy", "--fallback", "reference")
    assert out.returncode == 0, out.stderr
    assert "running the kept original module on reference instead" in out.stderr


def test_inspect_a_plain_module_shows_its_ir(cli, tmp_path):
    model, _, _ = _accum(tmp_path)
    out = cli("inspect", str(model))
    assert out.returncode == 0, out.stderr
    assert "content: a module (Accum)" in out.stdout and "add(%x, %h)" in out.stdout


def test_lower_warns_when_the_backend_is_unavailable(cli, tmp_path):
    model, _, _ = _accum(tmp_path)
    out = cli("lower", str(model), "-b", "toy", "-o", "low.lkm", dists=True, env={"LOWERKIT_TOY_UNAVAILABLE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("lowerkit: warning: Backend toy is not available")
    out = cli("run", "low.lkm", "--input", "x=x.npy", "--input", "h=h.npy", dists=True, env={"LOWERKIT_TOY_UNAVAILABLE": "1"})
    assert out.returncode == 1 and "Backend toy is not available" in out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "nothere.lkm"), "lowerkit: error: nothere.lkm: No such file or directory"),
        (("lower", "accum.lkm", "-b", "reference", "-o", "no/such/dir/o.lkm"), "lowerkit: error: no/such/dir/o.lkm: "),
        (("lower", "accum.lkm", "-b", "nope", "-o", "o.lkm"), "no backend named 'nope'"),
        (("lower", "accum.lkm", "-b", "reference", "-o", "o.lkm", "--spec", "{bad"), "--spec is not valid JSON"),
        (("lower", "accum.lkm", "-b", "reference", "-o", "o.lkm", "--spec", '{"fwd": {}}'), "names method(s) ['fwd']"),
        (("run", "accum.lkm", "--input", "x=x.npy"), "needs --input for h (f32[2, 3])"),
        (("run", "accum.lkm", "--input", "y=x.npy"), "has no input 'y'; its inputs are ['x', 'h']"),
        (("run", "accum.lkm", "--input", "x=missing.npy", "--input", "h=h.npy"), "cannot read missing.npy"),
        (("inspect", "x.npy"), "looks like a numpy .npy file"),
        (("inspect", "h.npy"), "lowerkit: error: h.npy: not a lowerkit file"),
        (("run", "accum.lkm", "--input", "x=accum.lkm", "--input", "h=h.npy"),
         "--input x: accum.lkm is not a .npy file (it starts with"),
        (("run", "accum.lkm", "--input", "x=x.npy", "--input", "x=h.npy", "--input", "h=h.npy"),
         "--input x is given twice"),
        (("lower", "accum.lkm", "-b", "reference", "-o", "o.lkm", "--spec", "@absent.json"),
         "--spec @absent.json: cannot read absent.json: No such file or directory"),
    ],
)
def test_user_errors_exit_1_with_one_line(cli, tmp_path, args, message):
    _accum(tmp_path)
    out = cli(*args)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_an_npz_input_is_refused_with_a_hint(cli, tmp_path):
    _, x, h = _accum(tmp_path)
    np.savez(tmp_path / "xh.npz", x=x, h=h)
    out = cli("run", "accum.lkm", "--input", "x=xh.npz", "--input", "h=h.npy")
    assert out.returncode == 1
    assert "--input x: xh.npz is not a .npy file (an .npz archive; give one .npy file per input)" in out.stderr


def test_a_closed_stdout_ends_quietly(monkeypatch):
    import io
    import sys

    from lowerkit.cli import main

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["backends", "--json"]) == 1
    assert stderr.getvalue() == ""


def test_debug_shows_the_traceback(cli, tmp_path):
    out = cli("--debug", "run", "nothere.lkm")
    assert out.returncode == 1 and "Traceback" in out.stderr


@pytest.mark.parametrize("args", [(), ("lower",), ("frobnicate",), ("run", "f.lkm", "--fallback", "gpu")])
def test_usage_errors_exit_2(cli, args):
    assert cli(*args).returncode == 2


def test_main_returns_codes_in_process(tmp_path, capsys):
    from lowerkit.cli import main

    assert main(["backends", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["inspect", str(tmp_path / "none.lkm")]) == 1
    assert capsys.readouterr().err.startswith("lowerkit: error:")


def test_lower_to_several_backends_partitions_and_inspect_shows_regions(cli, tmp_path):
    g = Graph()
    x = g.add_input("x", T)
    s = g.add_node("add", [x, x], [T], debug_handle=1).output
    g.set_outputs([g.add_node("exp", [s], [T], debug_handle=2).output])
    lk.save(Module({}, {"forward": GraphMethod(g)}, name="AddExp"), tmp_path / "addexp.lkm")
    x_value = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x_value)
    out = cli("lower", "addexp.lkm", "-b", "toy,reference", "-o", "part.lkm", dists=True)
    assert out.returncode == 0, out.stderr
    out = cli("run", "part.lkm", "--input", "x=x.npy", "-o", "y.npz", dists=True)
    assert out.returncode == 0, out.stderr
    with np.load(tmp_path / "y.npz", allow_pickle=False) as saved:
        np.testing.assert_allclose(saved["output0"], np.exp(x_value + x_value), rtol=1e-6)
    out = cli("inspect", "part.lkm", dists=True)
    assert out.returncode == 0, out.stderr
    assert "partitioned over backends ['toy', 'reference']" in out.stdout
    assert "backend: toy" in out.stdout and "backend: reference" in out.stdout


def test_lower_an_onnx_model(cli, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "relu.onnx"))
    np.save(tmp_path / "x.npy", np.array([[-1, 0, 2], [3, -4, 5]], np.float32))
    out = cli("lower", "relu.onnx", "-b", "reference", "-o", "relu.lkm", "--input-shape", "x=2,3")
    assert out.returncode == 0, out.stderr
    out = cli("run", "relu.lkm", "--input", "x=x.npy", "-o", "y.npz")
    assert out.returncode == 0, out.stderr
    with np.load(tmp_path / "y.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["y"], [[0, 0, 2], [3, 0, 5]])
    out = cli("lower", "relu.onnx", "-b", "reference", "-o", "relu.lkm", "--input-shape", "x")
    assert out.returncode == 1 and "--input-shape expects NAME=D,D,..." in out.stderr
