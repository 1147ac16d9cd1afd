"""The lowerkit file format: save and load modules and lowered modules.

``dumps``/``loads`` work on bytes, ``save``/``load`` on files (written atomically). The
layout is a fixed header (magic, format version, length, SHA-256) followed by a protobuf
``File`` message (``lowerkit.proto``); see docs/file-format.md. Loading never executes code
from the file: any corrupt, truncated, foreign or too-new input raises
:class:`~lowerkit.errors.FormatError`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import FormatError, LowerkitError
from .container import FORMAT_VERSION, frame, read_file, unframe, write_atomic

if TYPE_CHECKING:  # pragma: no cover
    from .._lowered import LoweredModule
    from ..ir.module import Module

__all__ = ["FORMAT_VERSION", "dumps", "load", "loads", "save"]


def dumps(obj: Module | LoweredModule) -> bytes:
    """The file bytes of a :class:`~lowerkit.Module` or :class:`~lowerkit.LoweredModule`.

    The encoding is deterministic: the same object always gives the same bytes, and
    ``dumps(loads(data)) == data``. Raises :class:`~lowerkit.errors.InputError` for objects
    the format cannot hold (non-graph methods, unsupported attribute or parameter types).
    """
    from google.protobuf.message import EncodeError

    from .convert import file_to_proto

    msg = file_to_proto(obj)
    try:
        payload = msg.SerializeToString(deterministic=True)
    except (EncodeError, ValueError, OverflowError) as err:  # above protobuf's 2 GiB limit
        raise FormatError(f"the module cannot be encoded in a lowerkit file: {err}") from err
    return frame(payload)


def loads(data: bytes, *, fallback: str | None = None) -> Module | LoweredModule:
    """Rebuild the object ``data`` (as made by :func:`dumps`) holds.

    Lowered modules compile on their backend here when it is available; otherwise
    ``BackendNotAvailableError`` / ``BackendNotFoundError``, unless ``fallback`` names a
    backend to run the kept original module on (see ``LoweredModule.from_record``).
    Raises :class:`~lowerkit.errors.FormatError` for anything that is not a valid file.
    """
    from google.protobuf.message import DecodeError

    from . import lowerkit_pb2 as pb
    from .convert import file_from_proto

    _, payload = unframe(data)
    msg = pb.File()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, RecursionError, ValueError, RuntimeError) as err:
        raise FormatError(f"lowerkit file payload does not decode: {err}") from None
    try:
        return file_from_proto(msg, fallback=fallback)
    except LowerkitError:
        raise
    except Exception as err:  # a rebuild step refused what the file says
        raise FormatError(f"lowerkit file content is invalid: {type(err).__name__}: {err}") from err


def save(obj: Module | LoweredModule, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` to ``path`` atomically: readers see the old file or the complete new one."""
    write_atomic(path, dumps(obj))


def load(path: str | os.PathLike[str], *, fallback: str | None = None) -> Module | LoweredModule:
    """Read the module saved at ``path``; see :func:`loads` for ``fallback`` and errors."""
    data = read_file(path)
    try:
        return loads(data, fallback=fallback)
    except FormatError as err:
        raise FormatError(f"{os.fspath(path)}: {err}") from err.__cause__
