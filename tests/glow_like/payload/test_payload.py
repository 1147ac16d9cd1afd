"""The protobuf payload: round trip, version refusal, corrupt and hostile payloads."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tests.glow_like.helpers import conv_bn_relu_graph, module_of, rand

import lowerkit_glow_like as glow
from lowerkit.errors import FormatError
from lowerkit_glow_like.payload import glow_like_pb2 as pb
from lowerkit_glow_like.payload.codec import decode, encode


@pytest.fixture(scope="module")
def payload() -> bytes:
    graph, params = conv_bn_relu_graph()
    return glow.lowerkit_preprocess(module=module_of(graph, params), compile_spec={})


def test_round_trip_is_exact(payload):
    programs = decode(payload)
    assert encode(programs) == payload
    (program,) = programs
    assert program.method == "forward" and program.options["opt_level"] == 2
    assert "fold_batch_norm" in program.passes


def test_payload_from_another_format_version_is_refused_naming_both_versions(payload):
    msg = pb.Payload()
    msg.ParseFromString(payload)
    msg.format = glow.PAYLOAD_FORMAT + 1
    msg.plugin_version = "9.9.9"
    ours = glow.PAYLOAD_FORMAT
    pattern = (rf"lowerkit-glow-like 9\.9\.9 \(payload format {ours + 1}\).*"
               rf"lowerkit-glow-like {re.escape(glow.__version__)} \(payload format {ours}\)")
    with pytest.raises(FormatError, match=pattern):
        glow.lowerkit_compile(processed=msg.SerializeToString(), compile_spec={})


@pytest.mark.parametrize("data", [b"", b"\x00garbage\xff" * 5, b"not a payload"])
def test_foreign_or_corrupt_bytes_are_format_errors(data):
    with pytest.raises(FormatError):
        glow.lowerkit_compile(processed=data, compile_spec={})


def test_truncated_payload_is_a_format_error(payload):
    with pytest.raises(FormatError):
        glow.lowerkit_compile(processed=payload[: len(payload) // 2], compile_spec={})


def _mutated(payload: bytes, edit) -> bytes:
    msg = pb.Payload()
    msg.ParseFromString(payload)
    edit(msg.programs[0])
    return msg.SerializeToString()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.buffers[p.instructions[0].outputs[0]].__setattr__("offset", 10**9), "outside the arena|aliases"),
        (lambda p: p.instructions[0].inputs.append(10**6), "names bad buffers"),
        (lambda p: p.instructions[0].__setattr__("op", "os.system"), "unknown op"),
        (lambda p: p.constants[0].__setattr__("data", b"\x00" * 3), "should hold"),
        (lambda p: p.buffers[0].__setattr__("dtype", "object"), "malformed"),
        (lambda p: p.buffers[0].__setattr__("root", -5), "out of range"),
        (lambda p: p.plan.__setattr__("peak_bytes", 2**39), "more than all its buffers"),
        (lambda p: p.plan.__setattr__("scratch_bytes", 2**39), "scratch bytes"),
        (lambda p: p.instructions[0].ClearField("attrs"), "cannot be bound|malformed|scratch|attributes give"),
    ],
)
def test_hostile_payloads_are_format_errors(payload, edit, message):
    with pytest.raises(FormatError, match=message):
        glow.lowerkit_compile(processed=_mutated(payload, edit), compile_spec={})


def test_describe_lists_instructions_and_the_three_numbers(payload):
    text = glow.describe(payload)
    assert "glow.conv2d" in text and "act=relu" in text
    for label in ("planned peak activation bytes", "sum of all activations (no reuse)", "liveness lower bound"):
        assert label in text


def test_generated_code_matches_the_proto(tmp_path):
    # The committed _pb2 must be what the committed .proto generates (command in the .proto).
    import pathlib
    import shutil
    import subprocess
    import sys

    pytest.importorskip("grpc_tools")
    plugin_root = pathlib.Path(glow.__file__).parent.parent
    proto = pathlib.Path("lowerkit_glow_like/payload/glow_like.proto")
    (tmp_path / proto.parent).mkdir(parents=True)
    shutil.copy(plugin_root / proto, tmp_path / proto)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", str(proto)],
                   cwd=tmp_path, check=True)
    generated = (tmp_path / proto.parent / "glow_like_pb2.py").read_text()
    committed = (plugin_root / proto.parent / "glow_like_pb2.py").read_text()
    assert generated == committed


def test_random_byte_corruption_gives_format_error_or_a_working_handle(payload):
    import random
    import warnings

    rng = random.Random(7)
    x = np.zeros((1, 3, 6, 6), np.float32)
    for _ in range(300):
        data = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                handles = glow.lowerkit_compile(processed=bytes(data), compile_spec={})
        except FormatError:
            continue
        for handle in handles.values():  # accepted: it must run (values may differ)
            if [list(handle.program.buffers[b].shape) for b in handle.program.inputs] == [[1, 3, 6, 6]]:
                with np.errstate(all="ignore"):
                    handle.run([x])
