"""Symbolic (free) dims in types: text form, verifier, inference, calls and the file format."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.errors import FormatError, InputError, ParseError, VerificationError
from lowerkit.ir import GraphMethod, Module, TensorType, format_graph, parse_graph, verify_graph
from lowerkit.opset import ShapeError, get_schema

TEXT = """method forward(%x: f32[N, 3, 8, 8], %w: f32[4, 3, 3, 3], %b: f32[N, 64]) -> f32[N, 64] {
  %c: f32[N, 4, 4, 4] = conv2d(%x, %w, stride=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1)  #0
  %r: f32[N, 4, 4, 4] = relu(%c)  #1
  %f: f32[N, 64] = flatten(%r, start_dim=1, end_dim=-1)  #2
  %s: f32[N, 64] = add(%f, %b)  #3
  return %s
}
"""


def _module() -> Module:
    _, graph, rt = parse_graph(TEXT)
    return Module({}, {"forward": GraphMethod(graph, rt)}, name="Sym")


def test_symbolic_dims_print_parse_and_verify() -> None:
    name, graph, returns_tuple = parse_graph(TEXT)
    verify_graph(graph)
    assert format_graph(graph, name, returns_tuple=returns_tuple) == TEXT
    assert graph.inputs[0].type == TensorType("f32", ("N", 3, 8, 8))
    assert graph.inputs[0].type.symbols == ("N",) and not graph.inputs[0].type.is_static


def test_a_wrong_symbolic_output_type_fails_verification() -> None:
    _, graph, _ = parse_graph(TEXT.replace("%r: f32[N, 4, 4, 4]", "%r: f32[M, 4, 4, 4]"))
    with pytest.raises(VerificationError, match="relu"):
        verify_graph(graph)


@pytest.mark.parametrize(
    "op, types, attrs, expected",
    [
        ("reshape", [("N", 4, 4)], {"shape": (-1, 16)}, ("N", 16)),
        ("transpose", [("N", 4, 5)], {"perm": (0, 2, 1)}, ("N", 5, 4)),
        ("linear", [("N", 6), (3, 6)], {}, ("N", 3)),
        ("matmul", [("N", 2, 6), (6, 3)], {}, ("N", 2, 3)),
        ("concat", [("N", 2), ("N", 3)], {"dim": 1}, ("N", 5)),
        ("global_avg_pool2d", [("N", 2, 3, 3)], {}, ("N", 2, 1, 1)),
        ("add", [("N", 3), (1, 3)], {}, ("N", 3)),
    ],
)
def test_inference_passes_the_batch_through(op, types, attrs, expected) -> None:
    schema = get_schema(op)
    (out,) = schema.infer([TensorType("f32", s) for s in types], schema.normalize_attrs(attrs))
    assert out.shape == expected


@pytest.mark.parametrize(
    "op, types, attrs, message",
    [
        ("concat", [("N", 2), ("N", 2)], {"dim": 0}, "output dim 0 depends on symbolic dim"),
        ("flatten", [("N", 2)], {"start_dim": 0}, "depends on symbolic dim"),
        ("reshape", [("N", 4)], {"shape": (2, 8)}, r"cannot reshape \[N, 4\]"),
        ("add", [("N", 3), ("M", 3)], {}, r"shapes \[N, 3\] and \[M, 3\] do not broadcast"),
    ],
)
def test_inference_refuses_what_a_type_cannot_express(op, types, attrs, message) -> None:
    schema = get_schema(op)
    with pytest.raises(ShapeError, match=message):
        schema.infer([TensorType("f32", s) for s in types], schema.normalize_attrs(attrs))


def test_calls_bind_symbols_consistently_across_inputs() -> None:
    module = _module()
    w = np.zeros((4, 3, 3, 3), np.float32)
    for n in (1, 3):
        assert module(np.ones((n, 3, 8, 8), np.float32), w, np.ones((n, 64), np.float32)).shape == (n, 64)
    with pytest.raises(InputError, match=r"input 'b': expected f32\[N, 64\] \(N=2 from the inputs before it\), got f32\[3, 64\]"):
        module(np.ones((2, 3, 8, 8), np.float32), w, np.ones((3, 64), np.float32))


def test_symbolic_types_survive_the_file_format() -> None:
    module = _module()
    again = lk.loads(lk.dumps(module))
    assert again.signature("forward") == module.signature("forward")
    assert lk.dumps(again) == lk.dumps(module)


def test_bad_symbol_entries_in_a_file_are_format_errors() -> None:
    from lowerkit.serialization import lowerkit_pb2 as pb
    from lowerkit.serialization.decoder import _type_from_proto

    msg = pb.TensorType(dtype="f32", shape=[-1, 3], symbols=["N"])
    with pytest.raises(FormatError, match="1 symbol entries for a shape of rank 2"):
        _type_from_proto(msg, "here")
    msg = pb.TensorType(dtype="f32", shape=[5, 3], symbols=["N", ""])
    with pytest.raises(FormatError, match="bad symbolic dim 'N'"):
        _type_from_proto(msg, "here")
    msg = pb.TensorType(dtype="f32", shape=[-1, 3], symbols=["1x", ""])
    with pytest.raises(FormatError, match="bad symbolic dim"):
        _type_from_proto(msg, "here")


def test_symbol_names_must_be_identifiers() -> None:
    with pytest.raises(ValueError, match="identifier"):
        TensorType("f32", ("2N", 3))
    with pytest.raises(ParseError):
        parse_graph(TEXT.replace("%x: f32[N, 3, 8, 8]", "%x: f32[-N, 3, 8, 8]"))
