"""Decoding hostile payloads: a valid checksum around nonsense content is still a FormatError."""

from __future__ import annotations

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.errors import FormatError
from lowerkit.serialization import container
from lowerkit.serialization import lowerkit_pb2 as pb

from tests.serialization.file_examples import cnn_module, tiny_module


def _file_of(module) -> pb.File:
    msg = pb.File()
    msg.ParseFromString(lk.dumps(module)[container.HEADER_SIZE :])
    return msg


def _load(msg: pb.File):
    return lk.loads(container.frame(msg.SerializeToString()))


@pytest.fixture()
def tiny() -> pb.File:
    return _file_of(tiny_module())


def _node(msg: pb.File, op: str) -> pb.Node:
    return next(n for n in msg.module.methods[0].graph.nodes if n.op == op)


def test_huge_shape_is_refused_before_allocating(tiny):
    tiny.module.parameters[0].tensor.shape[:] = [2**40, 2**40]
    with pytest.raises(FormatError, match=r"parameter 'w': shape \[1099511627776, 1099511627776\] has more than"):
        _load(tiny)


def test_shape_that_does_not_match_the_data_is_refused(tiny):
    tiny.module.parameters[0].tensor.shape[:] = [1000, 1000]
    with pytest.raises(FormatError, match=r"f32\[1000, 1000\] needs 4000000 bytes of data, the file has 8"):
        _load(tiny)


@pytest.mark.parametrize("dtype", ["object", "f128", "", "O", "<f4"])
def test_unknown_dtype_is_refused(tiny, dtype):
    tiny.module.parameters[0].tensor.dtype = dtype
    with pytest.raises(FormatError, match="unknown dtype"):
        _load(tiny)


def test_negative_and_too_many_dimensions_are_refused(tiny):
    value_type = tiny.module.methods[0].graph.inputs[0].type
    value_type.shape[:] = [-2]
    with pytest.raises(FormatError, match="negative dimension"):
        _load(tiny)
    value_type.shape[:] = [1] * 40
    with pytest.raises(FormatError, match="rank 40 is above the limit"):
        _load(tiny)


def test_node_reading_an_undefined_value_is_refused(tiny):
    _node(tiny, "relu").inputs[0] = "nowhere"
    with pytest.raises(FormatError, match=r"node 2 \('relu'.*reads %nowhere, which no earlier input or node defines"):
        _load(tiny)


def test_node_reading_a_later_value_is_refused(tiny):
    graph = tiny.module.methods[0].graph
    relu, add = graph.nodes[2], graph.nodes[1]
    add.inputs[0] = relu.outputs[0].name  # a cycle: add reads relu's output
    with pytest.raises(FormatError, match="which no earlier input or node defines"):
        _load(tiny)


def test_graph_output_reading_an_undefined_value_is_refused(tiny):
    tiny.module.methods[0].graph.outputs[0] = "ghost"
    with pytest.raises(FormatError, match="graph output reads %ghost"):
        _load(tiny)


def test_value_bound_twice_is_refused(tiny):
    graph = tiny.module.methods[0].graph
    graph.nodes[2].outputs[0].name = graph.inputs[0].name
    with pytest.raises(FormatError, match="value 'x' appears twice"):
        _load(tiny)


def test_unknown_op_is_refused(tiny):
    _node(tiny, "relu").op = "os.system"
    with pytest.raises(FormatError, match="unknown op 'os.system'"):
        _load(tiny)


def test_duplicate_names_are_refused(tiny):
    tiny.module.parameters.add(name="w").tensor.CopyFrom(tiny.module.parameters[0].tensor)
    with pytest.raises(FormatError, match="parameter 'w' appears twice"):
        _load(tiny)


def test_nameless_method_is_refused(tiny):
    tiny.module.methods[0].name = ""
    with pytest.raises(FormatError, match="method without a name"):
        _load(tiny)


def test_bool_tensor_with_other_bytes_is_refused(tiny):
    tensor = tiny.module.parameters[0].tensor
    tensor.dtype, tensor.data = "bool", b"\x01\x02"
    with pytest.raises(FormatError, match="bool data holds bytes other than 0 and 1"):
        _load(tiny)


def test_module_method_without_a_graph_is_refused(tiny):
    tiny.module.methods[0].signature.SetInParent()
    with pytest.raises(FormatError, match="a module method must be a graph"):
        _load(tiny)


def test_multi_output_method_must_be_a_tuple(tiny):
    graph = tiny.module.methods[0].graph
    graph.outputs.append(graph.outputs[0])
    with pytest.raises(FormatError, match="returns 2 outputs but is not marked as returning a tuple"):
        _load(tiny)


def test_empty_submodule_is_refused(tiny):
    tiny.module.submodules.add(name="s")
    with pytest.raises(FormatError, match="submodule 's' holds no module"):
        _load(tiny)


def test_graph_that_does_not_verify_is_refused(tiny):
    pytest.importorskip("lowerkit.ir.verify")
    _node(tiny, "relu").outputs[0].type.shape[:] = [3]  # relu of f32[2] cannot be f32[3]
    with pytest.raises(FormatError, match="module 'Tiny' does not verify: .*relu"):
        _load(tiny)


def test_wrong_attribute_kind_is_refused(tiny):
    pytest.importorskip("lowerkit.ir.verify")
    _node(tiny, "param").attrs[0].value.i = 3  # name must be a str
    with pytest.raises(FormatError, match="does not verify"):
        _load(tiny)


def test_deeply_nested_submodules_are_refused():
    # Build the nesting as raw bytes: each level is field 4 (submodules) of Module holding a
    # Submodule whose field 2 is the next Module.
    def length_delimited(field: int, body: bytes) -> bytes:
        out, n = bytearray([field << 3 | 2]), len(body)
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out) + body

    module = b""
    for _ in range(3000):
        module = length_delimited(4, length_delimited(2, module))
    with pytest.raises(FormatError):
        lk.loads(container.frame(length_delimited(1, module)))


def test_invalid_utf8_string_is_refused(tiny):
    payload = tiny.SerializeToString()
    name = b"Tiny"
    assert payload.count(name) == 1
    with pytest.raises(FormatError, match="does not decode"):
        lk.loads(container.frame(payload.replace(name, b"\xff\xfe\xfd\xfc")))


def test_reframed_payload_damage_gives_format_error_or_a_module():
    """Flip and cut every payload byte, then fix the checksum: the decoder alone must cope."""
    payload = lk.dumps(tiny_module())[container.HEADER_SIZE :]
    outcomes = {"error": 0, "module": 0}
    candidates = [payload[:n] for n in range(len(payload))]
    for i in range(len(payload)):
        for mask in (0xFF, 0x01, 0x80):
            damaged = bytearray(payload)
            damaged[i] ^= mask
            candidates.append(bytes(damaged))
    for candidate in candidates:
        try:
            module = lk.loads(container.frame(candidate))
        except FormatError:
            outcomes["error"] += 1
        else:
            assert isinstance(module, lk.Module)
            outcomes["module"] += 1
    assert outcomes["error"] > outcomes["module"] > 0


def test_nan_and_signed_zero_attributes_are_bit_exact():
    module = cnn_module()
    data = lk.dumps(module)
    loaded = lk.loads(data)
    k = next(n for n in lk.graph_of(loaded, "both").nodes if n.op == "constant").attrs["value"]
    assert k.tobytes() == np.array([np.nan, -0.0, np.inf], np.float32).tobytes()
    assert lk.dumps(loaded) == data
