"""The committed lowerkit_pb2.py is what scripts/gen_proto.sh makes from lowerkit.proto."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_proto.sh"
COMMITTED = ROOT / "core" / "lowerkit" / "serialization" / "lowerkit_pb2.py"
PROTO = ROOT / "core" / "lowerkit" / "serialization" / "lowerkit.proto"
_VERSION_LINE = re.compile(rb"^# Protobuf Python Version: (\S+)$", re.MULTILINE)


def _gencode_version(source: bytes) -> bytes | None:
    match = _VERSION_LINE.search(source)
    return match.group(1) if match else None


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> bytes:
    pytest.importorskip("grpc_tools.protoc")
    if shutil.which("sh") is None:
        pytest.skip("needs a POSIX shell to run scripts/gen_proto.sh")
    out = tmp_path_factory.mktemp("gen")
    subprocess.run(
        ["sh", str(SCRIPT), str(out)], check=True, env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    return (out / "lowerkit" / "serialization" / "lowerkit_pb2.py").read_bytes()


def test_committed_gencode_is_current(generated):
    committed = COMMITTED.read_bytes()
    if _gencode_version(generated) != _gencode_version(committed):
        pytest.skip(
            f"installed grpcio-tools makes gencode {_gencode_version(generated)!r}, the committed "
            f"file is {_gencode_version(committed)!r}; test_committed_schema_is_current still runs"
        )
    assert generated == committed, "lowerkit_pb2.py is stale: run scripts/gen_proto.sh and commit"


def test_committed_schema_is_current(generated):
    """Independent of the protoc version: the embedded descriptors must be equal."""
    from google.protobuf import descriptor_pb2

    from lowerkit.serialization import lowerkit_pb2

    fresh = re.search(rb"AddSerializedFile\((b'.*?')\)\n", generated, re.DOTALL)
    assert fresh is not None
    expected = descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(fresh.group(1).decode()))
    actual = descriptor_pb2.FileDescriptorProto.FromString(lowerkit_pb2.DESCRIPTOR.serialized_pb)
    assert actual == expected, "lowerkit_pb2.py is stale: run scripts/gen_proto.sh and commit"


def test_generated_module_is_named_uniquely():
    from lowerkit.serialization import lowerkit_pb2

    assert lowerkit_pb2.DESCRIPTOR.name == "lowerkit/serialization/lowerkit.proto"
    assert lowerkit_pb2.DESCRIPTOR.package == "lowerkit"
    assert PROTO.exists()
