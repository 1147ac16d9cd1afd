"""The container: header, checksum, and FormatError for every damaged or foreign input."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest

import lowerkit as lk
from lowerkit.errors import FormatError
from lowerkit.serialization import container

from tests.serialization.file_examples import tiny_module


@pytest.fixture(scope="module")
def small_file() -> bytes:
    data = lk.dumps(tiny_module())
    assert len(data) < 400  # keeps the exhaustive tests below fast
    return data


def test_frame_and_unframe_are_inverse():
    payload = b"\x00some payload\xff"
    data = container.frame(payload)
    assert len(data) == container.HEADER_SIZE + len(payload)
    assert container.unframe(data) == (container.FORMAT_VERSION, payload)
    assert container.unframe(bytearray(data))[1] == payload
    assert container.unframe(container.frame(b""))[1] == b""


def test_every_flipped_byte_is_a_format_error(small_file):
    for i in range(len(small_file)):
        for mask in (0xFF, 0x01, 0x10, 0x80):
            damaged = bytearray(small_file)
            damaged[i] ^= mask
            with pytest.raises(FormatError):
                lk.loads(bytes(damaged))


def test_every_truncation_is_a_format_error(small_file):
    for n in range(len(small_file)):
        with pytest.raises(FormatError):
            lk.loads(small_file[:n])


def test_truncated_and_padded_files_say_so(small_file):
    with pytest.raises(FormatError, match="truncated lowerkit file: 30 bytes, shorter than the 52-byte header"):
        lk.loads(small_file[:30])
    with pytest.raises(FormatError, match="truncated: header says"):
        lk.loads(small_file[:-1])
    with pytest.raises(FormatError, match="has trailing bytes"):
        lk.loads(small_file + b"\x00")


def test_bad_checksum_says_so(small_file):
    damaged = bytearray(small_file)
    damaged[-1] ^= 0x01
    with pytest.raises(FormatError, match="SHA-256 checksum does not match"):
        lk.loads(bytes(damaged))


def test_checksum_covers_the_version_fields(small_file):
    damaged = bytearray(small_file)
    damaged[10] ^= 0x01  # minor version: readers accept any minor, the checksum must catch it
    with pytest.raises(FormatError, match="checksum"):
        lk.loads(bytes(damaged))


def test_newer_major_version_asks_for_an_upgrade(small_file):
    payload = small_file[container.HEADER_SIZE :]
    with pytest.raises(FormatError, match=r"format 2\.0 is newer than this lowerkit reads .* upgrade lowerkit"):
        lk.loads(container.frame(payload, version=(2, 0)))
    with pytest.raises(FormatError, match="no longer supported"):
        lk.loads(container.frame(payload, version=(0, 3)))


def test_newer_minor_version_is_read(small_file):
    payload = small_file[container.HEADER_SIZE :]
    module = lk.loads(container.frame(payload, version=(1, 7)))
    assert module.name == "Tiny"


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("data.pkl", b"x")
    return buffer.getvalue()


def _npy_bytes() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ones(3))
    return buffer.getvalue()


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty input"),
        (_zip_bytes(), "looks like a zip archive"),
        (pickle.dumps({"weight": [1.0, 2.0]}), "looks like a Python pickle"),
        (_npy_bytes(), "looks like a numpy .npy file"),
        (np.random.default_rng(0).bytes(4096), "not a lowerkit file"),
        (b"\x89LKM", "shorter than the magic number"),
        (b"hello world, this is a text file\n" * 4, "not a lowerkit file: starts with b'hello wo'"),
    ],
    ids=["empty", "zip", "pickle", "npy", "random", "magic-prefix", "text"],
)
def test_foreign_inputs_are_format_errors(data, message):
    with pytest.raises(FormatError, match=message):
        lk.loads(data)


def test_foreign_file_error_names_the_path(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(_zip_bytes())
    with pytest.raises(FormatError, match=r"model\.pt: not a lowerkit file"):
        lk.load(path)


def test_pickle_is_never_run(tmp_path):
    class Boom:
        def __reduce__(self):
            return (pytest.fail, ("unpickled a file",))

    with pytest.raises(FormatError):
        lk.loads(pickle.dumps(Boom()))


def test_huge_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.lkm"
    with open(path, "wb") as f:
        f.write(container.MAGIC)
        f.truncate(container.HEADER_SIZE + container.MAX_PAYLOAD + 1)  # sparse: costs no disk
    with pytest.raises(FormatError, match="too large to be a lowerkit file"):
        lk.load(path)


def test_hostile_length_field_allocates_nothing(small_file):
    damaged = bytearray(small_file)
    damaged[12:20] = (2**63).to_bytes(8, "little")
    with pytest.raises(FormatError, match="truncated: header says 9223372036854775808 payload bytes"):
        lk.loads(bytes(damaged))


def test_payload_that_is_not_protobuf_is_a_format_error():
    with pytest.raises(FormatError, match="does not decode"):
        lk.loads(container.frame(b"\xff\xff\xff\xff"))


def test_valid_payload_with_nothing_in_it_is_a_format_error():
    with pytest.raises(FormatError, match="holds no module"):
        lk.loads(container.frame(b""))
