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
    return {name: payload_of(data) for name, data in files.items() if name.startswith(target + "-")}


def payload(backend: str) -> Callable[[bytes], None]:
    """Target: ``data`` as the payload of a real file lowered to ``backend``."""
    template = next(data for name, data in _seed_files().items() if name.startswith(backend + "-"))

    def target(data: bytes) -> None:
        _load(restamp(template, bytes(data)))

    target.__name__ = f"payload_{backend}"
    return target


def TARGETS() -> dict[str, Callable[[bytes], None]]:  # noqa: N802  (a registry, built lazily)
    """Target name -> function."""
    return {"container": container, **{b: payload(b) for b in PAYLOAD_BACKENDS}}
