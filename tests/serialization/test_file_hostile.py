"""Crafted files with valid checksums (issue 12): each gives a FormatError that names the
backend and the field, never a crash, a foreign exception or a silent run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lowerkit
from fuzz.seeds import Classifier, DenseNet, example_input
from fuzz.targets import payload_of, restamp
from lowerkit import nn, ops
from lowerkit.errors import FormatError

glow_pb = pytest.importorskip("lowerkit_glow_like.payload.glow_like_pb2")
nnpack_payload = pytest.importorskip("lowerkit_nnpack.payload")


@pytest.fixture(scope="module")
def dense() -> lowerkit.Module:
    return lowerkit.trace(DenseNet(), example_input())


@pytest.fixture(scope="module")
def glow_file(dense) -> bytes:
    return lowerkit.dumps(lowerkit.to_backend(dense, "glow_like", {"forward": {"opt_level": 0}}))


def _edit_glow(file: bytes, edit) -> bytes:
    msg = glow_pb.Payload()
    msg.ParseFromString(payload_of(file))
    edit(msg)
    return restamp(file, msg.SerializeToString())


def _set_conv_ints(name: str, values: list[int]):
    def edit(msg) -> None:
        (conv,) = [i for i in msg.programs[0].instructions if "conv2d" in i.op]
        (attr,) = [a for a in conv.attrs if a.name == name]
        del attr.ints.values[:]
        attr.ints.values.extend(values)

    return edit


@pytest.mark.parametrize(
    "field, values, message",
    [
        ("stride", [1_000_000_000, 1], r"stride values must be <= 65536, got \[1000000000, 1\]"),
        ("dilation", [1_000_000, 1_000_000], r"dilation values must be <= 65536"),
        ("stride", [0, 0], r"stride values must be >= 1, got \[0, 0\]"),
        ("stride", [2, 2], r"conv2d: output 0 is f32\[1, 4, 8, 8\], but the inputs and attributes give f32\[1, 4, 4, 4\]"),
        ("padding", [-1, 0, 0, 0], r"padding values must be >= 0"),
        ("padding", [9, 9, 9, 9], r"conv2d: output 0 is"),
    ],
)
def test_glow_like_conv_geometry_is_checked_at_load(glow_file, field, values, message):
    data = _edit_glow(glow_file, _set_conv_ints(field, values))
    with pytest.raises(FormatError, match=r"backend 'glow_like'.*instruction \d+ \(conv2d\).*" + message):
        lowerkit.loads(data)


def test_glow_like_groups_and_kernel_size_mismatch_are_refused(glow_file):
    def groups(msg) -> None:
        conv = [i for i in msg.programs[0].instructions if "conv2d" in i.op][0]
        conv.attrs.add(name="groups", i=3)

    with pytest.raises(FormatError, match="backend 'glow_like'.*groups 3"):
        lowerkit.loads(_edit_glow(glow_file, groups))

    def shrink_weight(msg) -> None:
        program = msg.programs[0]
        conv = [i for i in program.instructions if "conv2d" in i.op][0]
        weight = program.buffers[conv.inputs[1]]
        weight.shape[2] = 1_000_000  # kernel far larger than the image

    with pytest.raises(FormatError, match="backend 'glow_like'"):
        lowerkit.loads(_edit_glow(glow_file, shrink_weight))


def test_glow_like_absurd_fused_activation_and_arena_are_refused(glow_file, monkeypatch):
    def act(msg) -> None:
        conv = [i for i in msg.programs[0].instructions if "conv2d" in i.op][0]
        conv.attrs.add(name="act", s="explode")

    with pytest.raises(FormatError, match="act must be one of"):
        lowerkit.loads(_edit_glow(glow_file, act))
    monkeypatch.setenv("LOWERKIT_GLOW_LIKE_MAX_ARENA", "64")
    with pytest.raises(FormatError, match="above the 64-byte limit"):
        lowerkit.loads(glow_file)


def test_method_names_that_disagree_with_the_payload_are_a_format_error(glow_file):
    def rename(msg) -> None:
        msg.programs[0].method = "other"

    with pytest.raises(FormatError, match=r"backend 'glow_like'.*no handle for method\(s\) \['forward'\]"):
        lowerkit.loads(_edit_glow(glow_file, rename))


def test_a_valid_glow_like_file_still_loads_and_runs(glow_file, dense):
    x = example_input()
    np.testing.assert_allclose(lowerkit.loads(glow_file)(x), dense(x), rtol=1e-4, atol=1e-5)


# -- nnpack ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nnpack_file() -> bytes:
    module = lowerkit.trace(Classifier(), np.ones((2, 8), np.float32))
    return lowerkit.dumps(lowerkit.to_backend(module, "nnpack"))


def _nnpack_with(file: bytes, module, options) -> bytes:
    return restamp(file, nnpack_payload.encode(module, options))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"unknown": 1}, r"unknown option\(s\) \['unknown'\]"),
        ({"algorithm": "magic"}, "algorithm must be one of"),
        ({"threads": -1}, "threads must be an integer >= 0, got -1"),
        ({"batch_threshold": 0}, "batch_threshold must be an integer >= 1, got 0"),
    ],
)
def test_nnpack_bad_options_in_a_payload_are_format_errors(nnpack_file, options, message):
    module = lowerkit.trace(Classifier(), np.ones((2, 8), np.float32))
    data = _nnpack_with(nnpack_file, module, {"forward": options})
    with pytest.raises(FormatError, match=f"backend 'nnpack'.*{message}"):
        lowerkit.loads(data)


class CeilPool(nn.Module):
    def forward(self, x):
        return ops.max_pool2d(x, 2, ceil_mode=True)


def test_nnpack_payload_with_a_ceil_mode_pool_is_a_format_error(nnpack_file):
    module = lowerkit.trace(CeilPool(), np.ones((1, 1, 5, 5), np.float32))
    with pytest.raises(FormatError, match="(?s)backend 'nnpack'.*ceil_mode=True unsupported"):
        lowerkit.loads(_nnpack_with(nnpack_file, module, {}))


def test_nnpack_payload_nested_in_an_nnpack_payload_is_a_format_error(nnpack_file):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inner = lowerkit.loads(nnpack_file)
    with pytest.raises(FormatError, match="nnpack payload holds a module lowered to 'nnpack'"):
        lowerkit.loads(_nnpack_with(nnpack_file, inner, {}))


def test_nnpack_payload_header_that_is_not_an_object_is_a_format_error(nnpack_file):
    module = lowerkit.trace(Classifier(), np.ones((2, 8), np.float32))
    data = _nnpack_with(nnpack_file, module, {"forward": ["threads"]})
    with pytest.raises(FormatError, match="backend 'nnpack'.*options must be an object"):
        lowerkit.loads(data)


def test_files_nested_too_deep_are_refused():
    from lowerkit.serialization import MAX_NESTING

    module = lowerkit.trace(Classifier(), np.ones((2, 8), np.float32))
    data = lowerkit.dumps(lowerkit.to_backend(module, "reference"))
    for _ in range(MAX_NESTING + 1):
        data = restamp(data, data)  # reference payloads are files: nest one more level
    with pytest.raises(FormatError, match=f"nest more than {MAX_NESTING} deep"):
        lowerkit.loads(data)


def test_core_decoder_refuses_absurd_geometry_in_a_plain_module(dense):
    from lowerkit.serialization import lowerkit_pb2 as pb
    from lowerkit.serialization.container import frame, unframe

    msg = pb.File()
    msg.ParseFromString(bytes(unframe(lowerkit.dumps(dense))[1]))
    (conv,) = [n for n in msg.module.methods[0].graph.nodes if n.op == "conv2d"]
    (stride,) = [a for a in conv.attrs if a.name == "stride"]
    del stride.value.ints.values[:]
    stride.value.ints.values.extend([1_000_000_000, 1])
    data = frame(msg.SerializeToString(deterministic=True))
    with pytest.raises(FormatError, match=r"does not verify.*conv2d.*stride values must be <= 65536"):
        lowerkit.loads(data)
