"""lowerkit.onnx.load: per-op imports against ONNX Runtime, names, scopes and errors."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import lowerkit  # noqa: E402
import lowerkit.onnx  # noqa: E402
from lowerkit.errors import VerificationError  # noqa: E402
from lowerkit.ir.verify import verify_module  # noqa: E402

from tests.onnx.onnx_helpers import make_model, rand, run_ort  # noqa: E402

node = helper.make_node

W = rand(4, 2, 3, 3, seed=1)
B = rand(4, seed=2)

# (id, nodes, inputs, outputs, initializers, opset)
CASES = [
    ("conv_same_upper_stride_group_dilation",
     [node("Conv", ["x", "w", "b"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2], group=2)],
     [("x", [1, 4, 9, 8])], [("y", None)], {"w": W, "b": B}, 17),
    ("conv_same_lower_asymmetric",
     [node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2])],
     [("x", [2, 2, 8, 7])], [("y", None)], {"w": rand(3, 2, 2, 2)}, 11),
    ("conv_explicit_pads",
     [node("Conv", ["x", "w"], ["y"], pads=[0, 1, 2, 1], kernel_shape=[3, 3], dilations=[2, 1])],
     [("x", [1, 2, 6, 6])], [("y", None)], {"w": rand(3, 2, 3, 3)}, 13),
    ("conv_and_pools_1d",
     [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 2], strides=[2], dilations=[2]),
      node("MaxPool", ["c"], ["m"], kernel_shape=[3], pads=[1, 1], ceil_mode=1, strides=[2]),
      node("AveragePool", ["m"], ["a"], kernel_shape=[2], auto_pad="SAME_UPPER"),
      node("GlobalAveragePool", ["a"], ["y"])],
     [("x", [2, 3, 11])], [("y", None)], {"w": rand(4, 3, 3, seed=9), "b": rand(4, seed=10)}, 17),
    ("maxpool_ceil_pads_dilations",
     [node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
           dilations=[1, 2], ceil_mode=1)],
     [("x", [1, 2, 9, 10])], [("y", None)], {}, 17),
    ("avgpool_exclude_pad_same_lower",
     [node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")],
     [("x", [1, 2, 8, 7])], [("y", None)], {}, 17),
    ("avgpool_include_pad",
     [node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)],
     [("x", [1, 2, 5, 5])], [("y", None)], {}, 11),
    ("gemm_all_attributes",
     [node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
     [("a", [3, 2]), ("b", [4, 3])], [("y", None)], {"c": rand(2, 4, seed=3)}, 13),
    ("gemm_linear", [node("Gemm", ["a", "w", "bias"], ["y"], transB=1)],
     [("a", [2, 5])], [("y", None)], {"w": rand(3, 5), "bias": rand(3)}, 11),
    ("gemm_no_c", [node("Gemm", ["a", "b"], ["y"], alpha=3.0)],
     [("a", [2, 5]), ("b", [5, 3])], [("y", None)], {}, 13),
    ("batchnorm_and_globalpool",
     [node("BatchNormalization", ["x", "s", "o", "m", "v"], ["h"], epsilon=1e-3),
      node("GlobalAveragePool", ["h"], ["y"])],
     [("x", [2, 3, 4, 4])], [("y", None)],
     {"s": rand(3, seed=4), "o": rand(3, seed=5), "m": rand(3, seed=6),
      "v": np.abs(rand(3, seed=7)) + 0.5}, 15),
    ("softmax_opset11_coerces_to_2d", [node("Softmax", ["x"], ["y"], axis=1)],
     [("x", [2, 3, 4])], [("y", None)], {}, 11),
    ("logsoftmax_opset12_default_axis", [node("LogSoftmax", ["x"], ["y"])],
     [("x", [2, 3, 2, 2])], [("y", None)], {}, 12),
    ("softmax_opset13_axis0", [node("Softmax", ["x"], ["y"], axis=0)],
     [("x", [2, 3, 4])], [("y", None)], {}, 13),
    ("reshape_zero_and_minus_one", [node("Reshape", ["x", "shape"], ["y"])],
     [("x", [2, 3, 4])], [("y", None)], {"shape": np.array([0, -1, 2], np.int64)}, 17),
    ("flatten_axis0_and_axis2",
     [node("Flatten", ["x"], ["f0"], axis=0), node("Flatten", ["x"], ["f2"], axis=-1)],
     [("x", [2, 3, 4])], [("f0", None), ("f2", None)], {}, 13),
    ("clip_inputs_and_transpose_concat",
     [node("Clip", ["x", "lo", "hi"], ["c"]), node("Clip", ["x", "", "hi"], ["d"]),
      node("Transpose", ["c"], ["t"]), node("Transpose", ["d"], ["u"]),
      node("Concat", ["t", "u"], ["y"], axis=-1)],
     [("x", [2, 3])], [("y", None)],
     {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}, 13),
    ("clip_attributes_opset10", [node("Clip", ["x"], ["y"], min=-0.2, max=0.3)],
     [("x", [2, 3])], [("y", None)], {}, 10),
    ("elementwise_chain",
     [node("LeakyRelu", ["x"], ["a"], alpha=0.2), node("Sigmoid", ["a"], ["s"]),
      node("Tanh", ["x"], ["t"]), node("Add", ["s", "t"], ["u"]), node("Mul", ["u", "row"], ["m"]),
      node("Exp", ["m"], ["e"]), node("Log", ["e"], ["l"]), node("Sqrt", ["e"], ["q"]),
      node("Sub", ["l", "q"], ["d"]), node("Neg", ["d"], ["n"]), node("Relu", ["n"], ["r"]),
      node("Div", ["r", "e"], ["y"])],
     [("x", [2, 3])], [("y", None)], {"row": rand(3, seed=8)}, 14),
    ("matmul_batched_and_dropout_mask",
     [node("MatMul", ["a", "b"], ["m"]), node("Dropout", ["m", "ratio"], ["y", "mask"])],
     [("a", [2, 3, 4]), ("b", [4, 5])], [("y", None), ("mask", None, TensorProto.BOOL)],
     {"ratio": np.array(0.3, np.float32)}, 13),
    ("constant_and_identity",
     [node("Constant", [], ["k"], value_floats=[1.0, 2.0, 3.0]), node("Identity", ["k"], ["k2"]),
      node("Identity", ["x"], ["xi"]), node("Mul", ["xi", "k2"], ["y"])],
     [("x", [2, 3])], [("y", None)], {}, 13),
]


def _feeds(model) -> dict[str, np.ndarray]:
    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for i, vi in enumerate(model.graph.input):
        if vi.name not in initializers:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rand(*shape, seed=10 + i)
    return feeds


@pytest.mark.parametrize(("nodes", "inputs", "outputs", "inits", "opset"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_import_matches_onnxruntime(nodes, inputs, outputs, inits, opset) -> None:
    model = make_model(nodes, inputs, outputs, inits, opset=opset)
    feeds = _feeds(model)
    expected = run_ort(model, feeds)
    module = lowerkit.onnx.load(model)
    verify_module(module)
    actual = module(*feeds.values())
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_softmax_before_opset13_is_one_reshape_softmax_reshape() -> None:
    model = make_model([node("LogSoftmax", ["x"], ["y"], axis=1)], [("x", [2, 3, 4])], [("y", None)], opset=11)
    graph = lowerkit.graph_of(lowerkit.onnx.load(model))
    assert [n.op for n in graph.nodes] == ["reshape", "log_softmax", "reshape"]
    assert graph.nodes[0].attrs["shape"] == (2, 12)


def test_gemm_with_transposed_weight_is_linear() -> None:
    model = make_model([node("Gemm", ["a", "w", "bias"], ["y"], transB=1)], [("a", [2, 5])],
                       [("y", None)], {"w": rand(3, 5), "bias": rand(3)})
    graph = lowerkit.graph_of(lowerkit.onnx.load(model))
    assert [n.op for n in graph.nodes] == ["param", "param", "linear"]


def test_parameters_are_sanitised_recorded_and_shared() -> None:
    model = make_model(
        [node("Identity", ["onnx::W_1"], ["w_alias"]), node("MatMul", ["x", "onnx::W_1"], ["a"], name="mm1"),
         node("MatMul", ["a", "w_alias"], ["b"]), node("Reshape", ["b", "shape"], ["y"], name="/head/Reshape")],
        [("x", [2, 3])], [("y", None)],
        {"onnx::W_1": rand(3, 3), "shape": np.array([-1], np.int64), "unused": rand(2)},
    )
    imported = lowerkit.onnx.import_model(model)
    assert imported.parameter_names == {"onnx::W_1": "onnx__W_1"}
    assert list(imported.module.parameters) == ["onnx__W_1"]  # the shape is folded, unused dropped
    graph = lowerkit.graph_of(imported.module)
    assert [n.op for n in graph.nodes].count("param") == 1
    assert [n.scope for n in graph.nodes] == ["mm1", "mm1", "MatMul_2", "/head/Reshape"]
    assert all(n.source is None for n in graph.nodes)
    assert len({n.debug_handle for n in graph.nodes}) == len(graph.nodes)


def test_symbolic_dims_need_input_shapes() -> None:
    model = make_model([node("Relu", ["x"], ["y"])], [("x", ["batch", 3, "h"])], [("y", ["batch", 3, "h"])])
    with pytest.raises(lowerkit.InputError, match=r"'x' dim 0 \(batch\); 'x' dim 2 \(h\)"):
        lowerkit.onnx.load(model)
    module = lowerkit.onnx.load(model, input_shapes={"x": [5, 3, 2]})
    assert module.signature("forward").inputs[0][1].shape == (5, 3, 2)
    with pytest.raises(lowerkit.InputError, match=r"input_shapes\['x'\] = \[5, 4, 2\] does not fit"):
        lowerkit.onnx.load(model, input_shapes={"x": [5, 4, 2]})
    with pytest.raises(lowerkit.InputError, match=r"input_shapes names \['z'\]"):
        lowerkit.onnx.load(model, input_shapes={"x": [5, 3, 2], "z": [1]})


def test_constant_inputs_fix_a_runtime_shape() -> None:
    graph = helper.make_graph(
        [node("Reshape", ["x", "shape"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(lowerkit.UnsupportedOperatorError, match=r"Reshape 'r': the target shape .* must be a constant"):
        lowerkit.onnx.load(model)
    module = lowerkit.onnx.load(model, constant_inputs={"shape": np.array([3, 4], np.int64)})
    x = rand(2, 6)
    np.testing.assert_array_equal(module(x), x.reshape(3, 4))


def test_unsupported_ops_are_listed_together() -> None:
    model = make_model(
        [node("Abs", ["x"], ["a"], name="first_abs"), node("Relu", ["a"], ["r"]),
         node("Floor", ["r"], ["y"], name="the_floor")],
        [("x", [2])], [("y", None)],
    )
    with pytest.raises(lowerkit.UnsupportedOperatorError,
                       match=r"2 node\(s\).*Abs \(node #0 'first_abs'\), Floor \(node #2 'the_floor'\)"):
        lowerkit.onnx.load(model)


def test_unsupported_configurations_name_the_node() -> None:
    model = make_model([node("Div", ["a", "b"], ["y"], name="int_div")], [("a", [2]), ("b", [2])],
                       [("y", None)], elem_type=TensorProto.INT32)
    with pytest.raises(lowerkit.UnsupportedOperatorError, match=r"Div 'int_div': integer Div"):
        lowerkit.onnx.load(model)
    model = make_model([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])], [("x", [1, 1, 4, 4, 4])],
                       [("y", None)])
    with pytest.raises(lowerkit.UnsupportedOperatorError, match=r"only 1-D \(NCL\) and 2-D .* rank 5"):
        lowerkit.onnx.load(model)


def test_opsets_outside_the_range_are_refused() -> None:
    model = make_model([node("Relu", ["x"], ["y"])], [("x", [2])], [("y", None)], opset=6)
    with pytest.raises(lowerkit.UnsupportedOperatorError, match=r"opset 6; lowerkit imports opsets 7-25"):
        lowerkit.onnx.load(model)


def test_invalid_models_raise_format_error(tmp_path) -> None:
    with pytest.raises(lowerkit.FormatError, match="not an ONNX model"):
        lowerkit.onnx.load(b"\x08\x07garbage\xff\xff")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 40)
    with pytest.raises(lowerkit.FormatError, match="bad.onnx"):
        lowerkit.onnx.load(bad)
    graph = helper.make_graph([node("Relu", ["missing"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(lowerkit.FormatError, match=r"onnx.checker"):
        lowerkit.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with pytest.raises(lowerkit.InputError, match="does not exist"):
        lowerkit.onnx.load(tmp_path / "nope.onnx")
    with pytest.raises(lowerkit.InputError, match="expected an ONNX ModelProto"):
        lowerkit.onnx.load(42)


def test_load_from_path_and_bytes(tmp_path) -> None:
    model = make_model([node("Relu", ["x"], ["y"])], [("x", [3])], [("y", [3])])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = rand(3)
    for source in (path, str(path), model.SerializeToString()):
        np.testing.assert_array_equal(lowerkit.onnx.load(source)(x), np.maximum(x, 0))


@pytest.mark.parametrize("opset", [11, 17])
def test_shape_arithmetic_is_evaluated_at_import(opset) -> None:
    # What PyTorch writes for x.view(x.size(0), -1) / x.numel(), with a dynamic batch.
    unsqueeze = (node("Unsqueeze", ["n", "axes"], ["n1"]) if opset >= 13
                 else node("Unsqueeze", ["n"], ["n1"], axes=[0]))  # axes were an attribute
    model = make_model(
        [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
         unsqueeze, node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
         node("Reshape", ["x", "shape"], ["r"]), node("Size", ["x"], ["numel"]),
         node("Cast", ["numel"], ["numel_f"], to=TensorProto.FLOAT), node("Div", ["r", "numel_f"], ["y"])],
        [("x", ["batch", 3, 4])], [("y", ["batch", 12])],
        {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)},
        opset=opset,
    )
    module = lowerkit.onnx.load(model, input_shapes={"x": [2, 3, 4]})
    assert [n.op for n in lowerkit.graph_of(module).nodes] == ["reshape", "constant", "div"]
    assert module.parameters == {}
    x = rand(2, 3, 4)
    np.testing.assert_allclose(module(x), x.reshape(2, 12) / 24, rtol=1e-6)


def test_ops_that_cannot_be_folded_are_still_listed() -> None:
    model = make_model(
        [node("Shape", ["x"], ["s"]), node("Softplus", ["x"], ["c"], name="softplus_x"),
         node("Relu", ["c"], ["y"])],
        [("x", [2, 3])], [("y", None)],
    )
    with pytest.raises(lowerkit.UnsupportedOperatorError, match=r"1 node\(s\).*: Softplus \(node #1 'softplus_x'\)\."):
        lowerkit.onnx.load(model)


def test_squeeze_and_unsqueeze_are_reshapes() -> None:
    model = make_model(
        [node("Unsqueeze", ["x", "axes"], ["u"]), node("Relu", ["u"], ["r"]), node("Squeeze", ["r"], ["y"])],
        [("x", [2, 3])], [("y", None)], {"axes": np.array([-1, 0], np.int64)},
    )
    graph = lowerkit.graph_of(lowerkit.onnx.load(model))
    assert [(n.op, n.attrs.get("shape")) for n in graph.nodes] == [
        ("reshape", (1, 2, 3, 1)), ("relu", None), ("reshape", (2, 3))]


def test_declared_output_types_are_checked() -> None:
    graph = helper.make_graph(
        [node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(VerificationError, match=r"output 'y' is declared FLOAT\['\?', 4\] but the imported graph computes f32\[2, 3\]"):
        lowerkit.onnx.load(model, input_shapes={"x": [2, 3]})
