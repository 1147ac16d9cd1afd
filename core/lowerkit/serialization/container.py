"""The file container: a fixed header, then the protobuf payload.

Layout (all integers little-endian; see docs/file-format.md)::

    offset  size  field
    0       8     magic  b"\\x89LKM\\r\\n\\x1a\\n"
    8       2     format major version (uint16)
    10      2     format minor version (uint16)
    12      8     payload length in bytes (uint64)
    20      32    SHA-256 of bytes 0..20 followed by the payload
    52      ...   payload: a serialized ``lowerkit.File`` message

This module knows nothing about modules: it frames and unframes bytes, and writes files
atomically. Every malformed input raises :class:`~lowerkit.errors.FormatError`.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ..errors import FormatError

__all__ = [
    "BASE_FORMAT_VERSION",
    "FIELDS_1_1",
    "FORMAT_VERSION",
    "OUTPUT_NAMES_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_PAYLOAD",
    "frame",
    "read_file",
    "unframe",
    "write_atomic",
]

MAGIC = b"\x89LKM\r\n\x1a\n"
# (major, minor): a reader reads every minor of the majors it knows; see docs/file-format.md.
# The newest version this writer knows. dumps stamps the lowest version that expresses the
# content: 1.1 when a file uses a 1.1 field (Method.output_names, TensorType.symbols,
# LoweredModule.payload_version), else 1.0, so plain files stay readable by 1.0 readers.
FORMAT_VERSION = (1, 1)
BASE_FORMAT_VERSION = (1, 0)
OUTPUT_NAMES_VERSION = (1, 1)  # kept for callers of the name; same as FORMAT_VERSION
# Proto fields added in 1.1: a file setting any of them is stamped 1.1.
FIELDS_1_1 = frozenset({"output_names", "symbols", "payload_version"})
SUPPORTED_MAJORS = frozenset({1})
# protobuf cannot encode a message of 2 GiB or more.
MAX_PAYLOAD = 2**31 - 1

_PREFIX = struct.Struct("<8sHHQ")
HEADER_SIZE = _PREFIX.size + 32


def frame(payload: bytes, version: tuple[int, int] = FORMAT_VERSION) -> bytes:
    """Header + ``payload``."""
    if len(payload) > MAX_PAYLOAD:
        raise FormatError(
            f"the module needs {len(payload)} bytes, above the format's limit of {MAX_PAYLOAD}"
        )
    prefix = _PREFIX.pack(MAGIC, version[0], version[1], len(payload))
    import hashlib  # here, not at import: OpenSSL's binding costs ~5 ms of every start-up

    return prefix + hashlib.sha256(prefix + payload).digest() + payload


def unframe(data: bytes | bytearray | memoryview) -> tuple[tuple[int, int], memoryview]:
    """Check the header and checksum of ``data``; return ``(version, payload)``.

    The payload is a read-only view into ``data``, not a copy (loading holds the file once).
    """
    view = memoryview(data).cast("B")
    if len(view) < len(MAGIC) or view[: len(MAGIC)] != MAGIC:
        raise FormatError(_foreign_message(bytes(view[:64])))
    data = view.toreadonly()
    if len(data) < HEADER_SIZE:
        raise FormatError(
            f"truncated lowerkit file: {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header"
        )
    _, major, minor, length = _PREFIX.unpack_from(data)
    digest = bytes(data[_PREFIX.size : HEADER_SIZE])
    payload = data[HEADER_SIZE:]
    if length != len(payload):
        state = "truncated" if length > len(payload) else "has trailing bytes"
        raise FormatError(
            f"lowerkit file {state}: header says {length} payload bytes, found {len(payload)}"
        )
    import hashlib

    hasher = hashlib.sha256(data[: _PREFIX.size])
    hasher.update(payload)
    if hasher.digest() != digest:
        raise FormatError("lowerkit file is corrupt: its SHA-256 checksum does not match")
    if major not in SUPPORTED_MAJORS:
        newest = max(SUPPORTED_MAJORS)
        if major > newest:
            raise FormatError(
                f"lowerkit file format {major}.{minor} is newer than this lowerkit reads "
                f"(major version {newest}); upgrade lowerkit to load it"
            )
        raise FormatError(f"lowerkit file format {major}.{minor} is no longer supported")
    return (major, minor), payload


def _foreign_message(data: bytes) -> str:
    if not data:
        return "empty input: not a lowerkit file"
    if MAGIC.startswith(data):
        return f"truncated lowerkit file: {len(data)} bytes, shorter than the magic number"
    kinds = {b"PK\x03\x04": "a zip archive", b"\x80": "a Python pickle", b"\x93NUMPY": "a numpy .npy file"}
    for prefix, kind in kinds.items():
        if data.startswith(prefix):
            return f"not a lowerkit file (looks like {kind}); expected magic {MAGIC!r}"
    return f"not a lowerkit file: starts with {data[:8]!r}, expected magic {MAGIC!r}"


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a lowerkit file, refusing files too large to be one before reading them."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > HEADER_SIZE + MAX_PAYLOAD:
            raise FormatError(f"{os.fspath(path)}: {size} bytes is too large to be a lowerkit file")
        # Read what fstat promised, not more: a device such as /dev/zero reports size 0.
        return f.read(size)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one.

    The bytes go to a temporary file in the same directory, are flushed to disk, and
    replace ``path`` in one ``os.replace``; on any failure the temporary file is removed
    and an existing ``path`` is left untouched.
    """
    target = Path(path)
    try:
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as err:  # name the file asked for, not the temporary one
        raise type(err)(err.errno, err.strerror, os.fspath(path)) from err
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    # mkstemp creates files 0600; give the result the permissions open() would have.
    mask = os.umask(0)
    os.umask(mask)
    return mask
