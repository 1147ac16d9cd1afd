"""Printing graphs and modules: golden listings and literal formatting.

Golden files live in tests/ir/golden/ and are compared exactly. After an intended change
to the text form, regenerate them with

    LOWERKIT_REGEN_GOLDEN=1 python -m pytest tests/ir/test_ir_printer.py

and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.ir.ir_examples import cnn_graph, two_method_module
from lowerkit.ir import Graph, GraphMethod, Module, SourceLocation, TensorType, format_graph, format_module
from lowerkit.ir.printer import format_attr, format_tensor, quote

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("LOWERKIT_REGEN_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with LOWERKIT_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_cnn_graph_golden():
    g, _ = cnn_graph()
    check_golden("cnn_forward.txt", format_graph(g))


def test_graph_str_is_format_graph():
    g, _ = cnn_graph()
    assert str(g) == format_graph(g)


def test_module_golden():
    check_golden("cell_module.txt", format_module(two_method_module()))


def test_module_str_elides_large_constants_only():
    text = str(two_method_module())
    assert "tensor<f32[3, 6]>[...]" in text
    assert "tensor<f32[2, 3]>[[0.5, 4.5, 8.5], [12.5, 16.5, 20.5]]" in text
    assert "parameter \"h0\": f32[2, 3]" in text
    assert "submodule \"act\": module Activation" in text


def test_format_graph_prints_every_element_by_default():
    m = two_method_module()
    text = format_graph(m.methods["forward"].graph)
    assert "[...]" not in text
    assert "[[-1.0, -0.88235" in text  # the 18-element table, in full


def test_multi_output_and_tuple_results():
    text = format_graph(two_method_module().methods["accum"].graph, "accum")
    assert text.startswith("method accum(%x: f32[2, 3], %h: f32[2, 3]) -> (f32[2, 3], f32[2, 3]) {")
    assert "  return %mul, %sum\n" in text
    fwd = format_graph(two_method_module().methods["forward"].graph)
    assert '%a: f32[2, 3], %b: f32[2, 3] = call(%x, %param, method="accum", module="")  #6' in fwd


def test_single_output_tuple_uses_parentheses():
    g = Graph()
    x = g.add_input("x", TensorType("f32", (1,)))
    g.set_outputs([x])
    assert "-> f32[1] {" in format_graph(g)
    assert "-> (f32[1]) {" in format_graph(g, returns_tuple=True)
    m = Module(methods={"one": GraphMethod(g, returns_tuple=True)})
    assert "method one(%x: f32[1]) -> (f32[1]) {" in str(m)


def test_metadata_suffix_forms():
    g = Graph()
    x = g.add_input("x", TensorType("f32", (2,)))
    g.add_node("relu", [x], [x.type])
    g.add_node("relu", [x], [x.type], debug_handle=3)
    g.add_node("relu", [x], [x.type], scope="layer1.0.conv1")
    g.add_node("relu", [x], [x.type], scope="odd scope/x", source=SourceLocation("a b.py", 9))
    g.add_node("relu", [x], [x.type], debug_handle=0, scope="s", source=SourceLocation("n.py", 1))
    lines = format_graph(g).splitlines()[1:6]
    assert lines[0].endswith("relu(%x)")
    assert lines[1].endswith("relu(%x)  #3")
    assert lines[2].endswith("relu(%x)  @layer1.0.conv1")
    assert lines[3].endswith('relu(%x)  @"odd scope/x" at "a b.py":9')
    assert lines[4].endswith('relu(%x)  #0 @s at "n.py":1')


@pytest.mark.parametrize(
    "array, text",
    [
        (np.array([[1, 2], [3, 4]], np.float32), "tensor<f32[2, 2]>[[1.0, 2.0], [3.0, 4.0]]"),
        (np.array(0.1, np.float32), "tensor<f32[]>0.10000000149011612"),
        (np.array(0.1, np.float64), "tensor<f64[]>0.1"),
        (np.array([np.inf, -np.inf, np.nan, -0.0], np.float16), "tensor<f16[4]>[inf, -inf, nan, -0.0]"),
        (np.array([-5, 7], np.int64), "tensor<i64[2]>[-5, 7]"),
        (np.array([-128, 127], np.int8), "tensor<i8[2]>[-128, 127]"),
        (np.array([0, 255], np.uint8), "tensor<u8[2]>[0, 255]"),
        (np.array([True, False]), "tensor<bool[2]>[true, false]"),
        (np.zeros((0, 3), np.int32), "tensor<i32[0, 3]>[]"),
        (np.zeros((2, 0), np.int32), "tensor<i32[2, 0]>[[], []]"),
    ],
)
def test_format_tensor(array, text):
    assert format_tensor(array) == text


def test_format_tensor_nan_payloads_and_sign():
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFF800001], np.uint32)
    text = format_tensor(bits.view(np.float32))
    assert text == "tensor<f32[4]>[nan, -nan, nan:0x7fc00001, nan:0xff800001]"


def test_format_tensor_elides_only_large():
    assert format_tensor(np.zeros(16, np.float32), elide=True).endswith("0.0]")
    assert format_tensor(np.zeros(17, np.float32), elide=True) == "tensor<f32[17]>[...]"


@pytest.mark.parametrize(
    "value, text",
    [
        (1, "1"), (-3, "-3"), (1.0, "1.0"), (1e-05, "1e-05"), (float("-inf"), "-inf"),
        (True, "true"), (False, "false"), ((1, 2), "[1, 2]"), ((), "[]"), ((0.5, 2.0), "[0.5, 2.0]"),
        ("a\"b\\c\nd", '"a\\"b\\\\c\\nd"'), (None, "none"),
    ],
)
def test_format_attr(value, text):
    assert format_attr(value) == text


def test_quote_escapes_control_and_surrogate_characters():
    assert quote("\x00\x7f\ud800é") == '"\\u0000\\u007f\\ud800é"'


def test_unprintable_attribute_is_a_type_error():
    with pytest.raises(TypeError, match="cannot print attribute value"):
        format_attr({"a": 1})  # type: ignore[arg-type]


def test_odd_value_and_method_names_are_quoted():
    g = Graph()
    x = g.add_input("x", TensorType("f32", (1,)))
    x.name = "a b"
    g.set_outputs([x])
    assert format_graph(g, "my method").startswith('method "my method"(%"a b": f32[1])')


def test_unsupported_tensor_dtype_prints_without_data():
    assert format_tensor(np.zeros(2, np.complex64)) == "tensor<unsupported complex64[2]>[...]"


def test_module_with_lowered_method_and_submodule():
    from lowerkit.ir import Method, Signature

    class Lowered(Method):
        signature = Signature((("x", TensorType("f32", (2,))),), (TensorType("f32", (2,)),))

    class FakeLowered:
        backend = ["nnpack", "reference"]

    m = Module(methods={"run": Lowered()}, submodules={"d": FakeLowered()}, name="M")
    assert str(m) == (
        "module M {\n  submodule \"d\": lowered nnpack,reference\n}\n\n"
        "method run(%x: f32[2]) -> f32[2] = lowered Lowered\n"
    )
