"""The lowerkit file format: save and load modules and lowered modules.

``dumps``/``loads`` work on bytes, ``save``/``load`` on files (written atomically). The
layout is a fixed header (magic, format version, length, SHA-256) followed by a protobuf
``File`` message (``lowerkit.proto``); see docs/file-format.md. Loading never executes code
from the file: any corrupt, truncated, foreign or too-new input raises
:class:`~lowerkit.errors.FormatError`.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, InputError, LowerkitError
from .container import (
    BASE_FORMAT_VERSION,
    FIELDS_1_1,
    FORMAT_VERSION,
    OUTPUT_NAMES_VERSION,
    frame,
    read_file,
    unframe,
    write_atomic,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..lowering.lowered import LoweredModule
    from ..ir.module import Module
    from .decoder import Rebuild

__all__ = [
    "BASE_FORMAT_VERSION",
    "FORMAT_VERSION",
    "Decoded",
    "decode",
    "dumps",
    "file_format_error",
    "load",
    "loads",
    "read_file",
    "save",
]


# How deep files may nest inside backend payloads (a reference or nnpack payload is itself a
# file): each level re-reads the bytes below it, so an unbounded depth would make load time
# quadratic in the file size.
MAX_NESTING = 8
_nesting = threading.local()


@dataclass(frozen=True, slots=True)
class Decoded:
    """What :func:`decode` found in a file."""

    version: tuple[int, int]  # the file's (major, minor) format version
    payload_size: int  # bytes after the header
    obj: Any  # the Module or LoweredModule (or what ``rebuild`` made of a lowered one)


def dumps(obj: Module | LoweredModule) -> bytes:
    """The file bytes of a :class:`~lowerkit.Module` or :class:`~lowerkit.LoweredModule`.

    The encoding is deterministic: the same object always gives the same bytes, and
    ``dumps(loads(data)) == data``. Raises :class:`~lowerkit.errors.InputError` for objects
    the format cannot hold (non-graph methods, unsupported attribute or parameter types).
    """
    from google.protobuf.message import EncodeError

    from .encoder import file_to_proto

    msg = file_to_proto(obj)
    try:
        payload = msg.SerializeToString(deterministic=True)
    except (EncodeError, ValueError, OverflowError) as err:  # above protobuf's 2 GiB limit
        raise FormatError(f"the module cannot be encoded in a lowerkit file: {err}") from err
    # The lowest version that expresses the content (docs/file-format.md, Versioning).
    return frame(payload, FORMAT_VERSION if _uses_1_1(msg) else BASE_FORMAT_VERSION)


def _uses_1_1(msg: Any) -> bool:
    """Whether any message in the file (at any depth) sets a field added in format 1.1."""
    for field, value in msg.ListFields():
        if field.name in FIELDS_1_1 and value:
            return True
        if field.message_type is None:
            continue
        items = value if isinstance(value, Iterable) else [value]
        if any(_uses_1_1(item) for item in items if hasattr(item, "ListFields")):
            return True
    return False


def loads(data: bytes, *, fallback: str | None = None) -> Module | LoweredModule:
    """Rebuild the object ``data`` (as made by :func:`dumps`) holds.

    Lowered modules compile on their backend here when it is available; otherwise
    ``BackendNotAvailableError`` / ``BackendNotFoundError``, unless ``fallback`` names a
    backend to run the kept original module on (see ``LoweredModule.from_record``).
    Raises :class:`~lowerkit.errors.FormatError` for anything that is not a valid file.
    """
    return decode(data, fallback=fallback).obj


def decode(
    data: bytes, *, fallback: str | None = None, rebuild: Rebuild | None = None
) -> Decoded:
    """:func:`loads` that also tells the format version and payload size.

    ``rebuild(record)`` replaces ``LoweredModule.from_record(record, fallback=fallback)``
    for every lowered module in the file, e.g. to inspect a file without compiling; it must
    return an object with ``signature(method)`` (the verifier checks calls against it).
    """
    from google.protobuf.message import DecodeError

    from . import lowerkit_pb2 as pb
    from .decoder import default_rebuild, file_from_proto

    if isinstance(data, (str, os.PathLike)):
        raise InputError(
            f"loads expects the bytes lowerkit.dumps made, got {type(data).__name__} "
            f"{os.fspath(data)[:80]!r}; use lowerkit.load(path) to read a file"
        )
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputError(f"loads expects the bytes lowerkit.dumps made, got {type(data).__name__}")
    version, payload = unframe(data)
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_NESTING:  # a backend's payload holding a file holding a payload ...
        raise FormatError(
            f"lowerkit files nest more than {MAX_NESTING} deep (payloads holding files); refused"
        )
    msg = pb.File()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, RecursionError, ValueError, RuntimeError) as err:
        raise FormatError(f"lowerkit file payload does not decode: {err}") from None
    # Decoding makes millions of small acyclic objects for a big graph; the cyclic collector
    # would traverse the growing heap again and again (a third of the load time), so it
    # pauses while the file is decoded.
    collecting = gc.isenabled()
    gc.disable()
    _nesting.depth = depth + 1
    try:
        obj = file_from_proto(msg, rebuild=rebuild or default_rebuild(fallback))
    except LowerkitError:
        raise
    except RecursionError:
        raise FormatError("lowerkit file nests modules too deeply to load") from None
    except Exception as err:  # a rebuild step refused what the file says
        raise FormatError(f"lowerkit file content is invalid: {type(err).__name__}: {err}") from err
    finally:
        _nesting.depth = depth
        if collecting:
            gc.enable()
    return Decoded(version, len(payload), obj)


def save(obj: Module | LoweredModule, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` to ``path`` atomically: readers see the old file or the complete new one."""
    write_atomic(path, dumps(obj))


def load(path: str | os.PathLike[str], *, fallback: str | None = None) -> Module | LoweredModule:
    """Read the module saved at ``path``; see :func:`loads` for ``fallback`` and errors."""
    data = read_file(path)
    try:
        return loads(data, fallback=fallback)
    except FormatError as err:
        raise file_format_error(path, err) from err.__cause__


def file_format_error(path: str | os.PathLike[str], err: FormatError) -> FormatError:
    """``err`` with the file named first (and a pointer to the ONNX importer for .onnx files)."""
    name = os.fspath(path)
    hint = ""
    if str(name).lower().endswith(".onnx"):
        hint = "; ONNX models are imported with lowerkit.onnx.load (or `lowerkit lower MODEL.onnx`)"
    return FormatError(f"{name}: {err}{hint}")
