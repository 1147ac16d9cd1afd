"""Calls as in ONNX Runtime: feed dicts, keyword inputs and output names, for every module kind."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.serialization import unframe

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 2.0, np.float32)


def _named(x, y):
    return {"total": x + y, "product": x * y}


def _kinds():
    module = lk.trace(_named, X, Y)
    yield "module", module
    yield "lowered", lk.to_backend(module, "reference")
    if any(b.name == "nnpack" and b.available for b in lk.backends()):
        yield "partitioned", lk.to_backend(module, ["nnpack", "reference"])
    yield "loaded", lk.loads(lk.dumps(lk.to_backend(module, "reference")))


@pytest.mark.parametrize("kind", ["module", "lowered", "partitioned", "loaded"])
def test_positional_keyword_and_feed_dict_calls_agree(kind):
    found = dict(_kinds())
    if kind not in found:
        pytest.skip(f"{kind}: nnpack is not available")
    m = found[kind]
    expected = (X + Y, X * Y)  # numpy is the oracle
    for got in (m(X, Y), m(x=X, y=Y), m(X, y=Y), m.forward(y=Y, x=X), m.run("forward", {"x": X, "y": Y}),
                m.run("forward", X, Y), m.run("forward", x=X, y=Y)):
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    assert m.signature("forward").names_out == ("total", "product")


def test_call_mistakes_name_the_inputs():
    m = lk.trace(_named, X, Y)
    with pytest.raises(lk.InputError, match=r"has no input\(s\) \['z'\].*its inputs are \['x', 'y'\]"):
        m(x=X, z=Y)
    with pytest.raises(lk.InputError, match=r"missing input\(s\) \['y'\] \(given in the feed dict"):
        m.run("forward", {"x": X})
    with pytest.raises(lk.InputError, match="'x' is given by position and by name"):
        m(X, x=X)
    with pytest.raises(lk.InputError, match="did you mean 'y'"):
        m.run("forward", {"x": X, "yy": Y})
    with pytest.raises(lk.InputError, match="feed dict maps input names"):
        m.run("forward", {0: X, 1: Y})


def test_traced_methods_name_outputs_output0_unless_a_dict_names_them():
    plain = lk.trace(lambda x: (x + 1, x - 1), X)
    assert plain.signature("forward").names_out == ("output0", "output1")
    assert plain.signature("forward").output_names == ()
    named = lk.trace(lambda x: {"up": x + 1}, X)
    assert named.signature("forward").names_out == ("up",)
    assert named.signature("forward").returns_tuple  # a dict returns a tuple, in its order
    with pytest.raises(lk.InputError, match="keys name the outputs"):
        lk.trace(lambda x: {"": x}, X)


def test_output_names_survive_save_and_load_and_stamp_format_1_1():
    named = lk.trace(_named, X, Y)
    for obj in (named, lk.to_backend(named, "reference"), lk.to_backend(named, "reference", keep_source=True)):
        data = lk.dumps(obj)
        assert unframe(data)[0] == (1, 1)
        back = lk.loads(data)
        assert back.signature("forward").names_out == ("total", "product")
        assert lk.dumps(back) == data
    # Without names the file is what an older lowerkit wrote (format 1.0, no field 5).
    plain = lk.trace(lambda x: x + 1, X)
    data = lk.dumps(plain)
    assert unframe(data)[0] == (1, 0)
    assert lk.loads(data).signature("forward").names_out == ("output0",)


def test_onnx_output_names_are_kept_through_import_lowering_and_files():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from lowerkit import onnx as lk_onnx

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["activated"]), helper.make_node("Neg", ["x"], ["negated"])],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("activated", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("negated", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = X - 2
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
    module = lk_onnx.load(data)
    lowered = lk.loads(lk.dumps(lk.to_backend(module, "reference")))
    for m in (module, lowered):
        assert m.signature("forward").names_out == ("activated", "negated")
        got = dict(zip(m.signature("forward").names_out, m.run("forward", {"x": x})))
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value)
