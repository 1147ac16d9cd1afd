"""lowerkit.onnx.backend: the onnx.backend.base.Backend adapter."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import lowerkit  # noqa: E402
import lowerkit.onnx  # noqa: E402
from lowerkit.onnx import backend  # noqa: E402

from tests.onnx.onnx_helpers import make_model, rand  # noqa: E402

node = helper.make_node


def _relu_add(batch="N"):
    return make_model(
        [node("Relu", ["x"], ["r"]), node("Add", ["r", "b"], ["y"])],
        [("x", [batch, 3]), ("b", [3])], [("y", [batch, 3])],
    )


def test_prepare_run_by_position_and_name() -> None:
    rep = backend.prepare(_relu_add(batch=2))
    x, b = rand(2, 3), rand(3, seed=1)
    expected = np.maximum(x, 0) + b
    out = rep.run([x, b])
    np.testing.assert_allclose(out[0], expected)
    np.testing.assert_allclose(out["y"], expected)
    np.testing.assert_allclose(rep.run({"x": x, "b": b}).y, expected)
    assert rep.lowered.backend == "reference"
    with pytest.raises(lowerkit.InputError, match=r"missing \['b'\], unknown \['z'\]"):
        rep.run({"x": x, "z": b})
    with pytest.raises(lowerkit.InputError, match=r"takes 2 inputs \['x', 'b'\], got 1"):
        rep.run([x])


def test_symbolic_batch_is_lowered_per_shape() -> None:
    rep = backend.prepare(_relu_add())
    b = rand(3, seed=1)
    for batch in (1, 4, 1):
        x = rand(batch, 3, seed=batch)
        np.testing.assert_allclose(rep.run([x, b])[0], np.maximum(x, 0) + b)
    assert len(rep._lowered) == 2
    with pytest.raises(lowerkit.InputError, match="lowered per input shape"):
        rep.lowered  # noqa: B018


def test_inputs_that_must_be_constant_are_specialised() -> None:
    graph = helper.make_graph(
        [node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", "cols"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = backend.prepare(model)
    assert rep.specialised_inputs == ("shape",)
    x = rand(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        np.testing.assert_array_equal(rep.run([x, np.array(shape, np.int64)])[0], x.reshape(shape))
    assert len(rep._lowered) == 2


def test_run_node_and_run_model() -> None:
    x = rand(2, 3, 4, 4)
    (y,) = backend.run_node(node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), [x])
    np.testing.assert_array_equal(y, x.reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5)))
    model = make_model([node("Sigmoid", ["x"], ["y"])], [("x", [3])], [("y", [3])])
    (s,) = backend.run_model(model, [np.zeros(3, np.float32)])
    np.testing.assert_array_equal(s, np.full(3, 0.5, np.float32))


def test_devices_and_backend_choice() -> None:
    assert lowerkit.onnx.backend is backend  # reachable as an attribute, imported lazily
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    with pytest.raises(lowerkit.InputError, match="device 'CPU', not 'CUDA'"):
        backend.prepare(_relu_add(batch=1), "CUDA")
    cls = backend.backend_for(["reference"])
    assert cls.backend == "reference" and issubclass(cls, onnx.backend.base.Backend)
    assert backend.backend_for("nnpack,reference").backend == ["nnpack", "reference"]
    with pytest.raises(lowerkit.BackendNotFoundError):
        backend.prepare(_relu_add(batch=1), backend="no_such_backend")


def test_core_does_not_import_onnx_and_says_how_to_get_it() -> None:
    script = (
        "import sys; sys.modules['onnx'] = None\n"  # makes `import onnx` fail
        "import lowerkit, lowerkit.onnx\n"
        "assert 'lowerkit.onnx.backend' not in sys.modules\n"
        "try:\n"
        "    lowerkit.onnx.load('m.onnx')\n"
        "except lowerkit.LowerkitError as e:\n"
        "    assert isinstance(e, ImportError); print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "pip install lowerkit[onnx]" in out.stdout
    out = subprocess.run(
        [sys.executable, "-c", "import sys, lowerkit; print('onnx' in sys.modules, 'lowerkit.onnx' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.split() == ["False", "False"]
