"""The processed payload: a small JSON header (format version, options) and the module in lowerkit's format.

Layout: ``b"LKNNPACK"`` | u32 format version | u32 header length | JSON header | module bytes
(``lowerkit.dumps``). Nothing here depends on the machine: ``threads=0`` stays "all cores
of wherever it runs". No pickle.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import lowerkit
from lowerkit.errors import FormatError

MAGIC = b"LKNNPACK"
FORMAT_VERSION = 2  # 2: the module may have a free batch dim (lowerkit format 1.1)
READS = (2, 1)  # format 1 payloads have the same layout
_PREFIX = struct.Struct("<8sII")


def encode(module: Any, options: dict[str, dict[str, Any]]) -> bytes:
    """Serialise ``module`` and per-method ``options`` into the payload."""
    header = json.dumps({"options": options}, sort_keys=True).encode("utf-8")
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header + lowerkit.dumps(module)


def decode(payload: bytes) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``(module, options)`` from a payload; ``FormatError`` when it is not one this version reads."""
    if not isinstance(payload, (bytes, bytearray)) or len(payload) < _PREFIX.size:
        raise FormatError("nnpack payload is truncated: shorter than its fixed header")
    magic, version, length = _PREFIX.unpack_from(payload)
    if magic != MAGIC:
        raise FormatError(f"not an nnpack payload: magic {magic!r}, expected {MAGIC!r}")
    if version not in READS:
        raise FormatError(f"nnpack payload format {version} unsupported; this version reads {list(READS)}")
    start = _PREFIX.size
    if start + length > len(payload):
        raise FormatError("nnpack payload is truncated inside its JSON header")
    try:
        header = json.loads(bytes(payload[start : start + length]).decode("utf-8"))
        options = header["options"]
        if not isinstance(options, dict):
            raise TypeError("options is not an object")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise FormatError(f"nnpack payload header is corrupt: {err}") from None
    module = _decode_module(bytes(payload[start + length :]))
    return module, options


def _refuse_lowered(record: Any) -> Any:
    raise FormatError(
        f"nnpack payload holds a module lowered to {record.backend!r}; it must hold a plain module"
    )


def _decode_module(data: bytes) -> Any:
    """The plain module inside the payload: nothing in it is compiled (a lowered module inside
    an nnpack payload is refused, not loaded), and every error is the payload's."""
    from lowerkit.serialization import decode as decode_file

    try:
        module = decode_file(data, rebuild=_refuse_lowered).obj
    except FormatError as err:
        raise FormatError(f"nnpack payload: the module inside does not load: {err}") from None
    except lowerkit.LowerkitError as err:
        raise FormatError(f"nnpack payload: the module inside is invalid: {err}") from None
    if not isinstance(module, lowerkit.Module):
        raise FormatError(f"nnpack payload must hold a plain module, got {type(module).__name__}")
    if module.submodules:
        raise FormatError(
            f"nnpack payload: module {module.name!r} has submodules {sorted(module.submodules)}; "
            "nnpack payloads hold one flat module"
        )
    return module
