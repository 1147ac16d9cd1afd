"""The fuzz targets: each takes arbitrary bytes and must end in a documented error or success.

``container(data)`` feeds ``lowerkit.loads``: the first byte chooses between the raw bytes
(header and checksum fuzzed too) and the rest framed with a valid header and checksum (so
the fuzzer reaches the protobuf decoder, verifier and backends). ``payload(backend)(data)``
puts ``data`` as the payload of a real file lowered to ``backend``, re-stamped with valid
checksums, so the fuzzer reaches the backend's payload decoder and compile.

Anything but success or :data:`ALLOWED` escaping a target is a finding.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import warnings
from collections.abc import Callable

import lowerkit
from lowerkit.errors import BackendNotAvailableError, BackendNotFoundError, FormatError
from lowerkit.serialization import lowerkit_pb2 as pb
from lowerkit.serialization.container import frame, unframe

__all__ = ["ALLOWED", "TARGETS", "container", "payload", "restamp", "seeds_for"]

# FormatError for the file's faults; the other two are this machine's (a backend the fuzzer
# named that is not installed or not available here), which the file cannot cause to crash.
ALLOWED = (FormatError, BackendNotFoundError, BackendNotAvailableError)
PAYLOAD_BACKENDS = ("glow_like", "nnpack")


def _load(data: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            lowerkit.loads(data)
        except ALLOWED:
            pass


def container(data: bytes) -> None:
    """Target: the whole file (odd first byte) or a payload framed with a valid checksum."""
    if not data:
        return _load(data)
    if data[0] & 1:
        return _load(data[1:])
    return _load(frame(bytes(data[1:])))


def restamp(template: bytes, new_payload: bytes) -> bytes:
    """``template`` (a file of one lowered module) with its backend payload replaced."""
    _, body = unframe(template)
    msg = pb.File()
    msg.ParseFromString(body)
    msg.lowered.payload = new_payload
    msg.lowered.payload_sha256 = hashlib.sha256(new_payload).digest()
    return frame(msg.SerializeToString(deterministic=True))


@functools.lru_cache(maxsize=None)
def _seed_files() -> dict[str, bytes]:
    from .seeds import seed_files

    return seed_files()


def payload_of(file: bytes) -> bytes:
    _, body = unframe(file)
    msg = pb.File()
    msg.ParseFromString(body)
    return msg.lowered.payload


def seeds_for(target: str) -> dict[str, bytes]:
    """The seed inputs of ``target`` ("container" or a backend name)."""
    files = _seed_files()
    if target == "container":
        # Framed form (even first byte) of each seed's payload, and one raw file.
        seeds = {name: b"\x00" + bytes(unframe(data)[1]) for name, data in files.items()}
        seeds["raw-module"] = b"\x01" + files["container-module"]
        return seeds
    seeds = {name: payload_of(data) for name, data in files.items() if name.startswith(target + "-")}
    if target == "nnpack":
        seeds = {name: _nnpack_unframed(data) for name, data in seeds.items()}
    return seeds


# nnpack payloads hold a whole lowerkit file after their JSON header; its checksum would stop
# the fuzzer, so the nnpack target's input carries that file's protobuf unframed, and the
# target frames it (valid checksum) before loading.
_NNPACK_PREFIX = struct.Struct("<8sII")


def _nnpack_split(data: bytes) -> tuple[bytes, bytes] | None:
    if len(data) < _NNPACK_PREFIX.size or data[:8] != b"LKNNPACK":
        return None
    end = _NNPACK_PREFIX.size + _NNPACK_PREFIX.unpack_from(data)[2]
    return (data[:end], data[end:]) if end <= len(data) else None


def _nnpack_framed(data: bytes) -> bytes:
    parts = _nnpack_split(data)
    return data if parts is None else parts[0] + frame(parts[1])


def _nnpack_unframed(data: bytes) -> bytes:
    parts = _nnpack_split(data)
    return data if parts is None else parts[0] + bytes(unframe(parts[1])[1])


def payload(backend: str) -> Callable[[bytes], None]:
    """Target: ``data`` as the payload of a real file lowered to ``backend`` (for nnpack, the
    file inside the payload is framed by the target: see ``_nnpack_framed``)."""
    template = next(data for name, data in _seed_files().items() if name.startswith(backend + "-"))
    prepare = _nnpack_framed if backend == "nnpack" else bytes

    def target(data: bytes) -> None:
        _load(restamp(template, prepare(bytes(data))))

    target.__name__ = f"payload_{backend}"
    return target


def TARGETS() -> dict[str, Callable[[bytes], None]]:  # noqa: N802  (a registry, built lazily)
    """Target name -> function."""
    return {"container": container, **{b: payload(b) for b in PAYLOAD_BACKENDS}}
