"""A target machine's backends: this machine's, or read from ``lowerkit backends --json``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import InputError

__all__ = ["Target", "TargetBackend", "load_target", "local_target"]


@dataclass(frozen=True, slots=True)
class TargetBackend:
    name: str
    distribution: str = ""
    version: str = ""
    available: bool | None = None  # None: not reported
    note: str = ""
    error: str | None = None
    payload_versions: tuple[str, ...] | None = None  # None: not reported


@dataclass(frozen=True, slots=True)
class Target:
    """Where a file should run: a description and its backends by name."""

    description: str
    backends: dict[str, TargetBackend]


def local_target() -> Target:
    """This machine, as ``lowerkit.backends()`` sees it (imports plugins, compiles nothing)."""
    from ..backend.registry import backends

    found = {
        b.name: TargetBackend(b.name, b.distribution, b.version, b.available, b.note, b.error, b.payload_versions)
        for b in backends()
    }
    return Target("this machine", found)


def load_target(path: str | os.PathLike[str]) -> Target:
    """Read a manifest: the JSON list ``lowerkit backends --json`` printed on the target.

    Read defensively: unknown fields are ignored, missing optional ones are "not reported";
    anything that is not a list of objects with a ``name`` is an ``InputError`` naming the file.
    """
    where = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as err:
        raise InputError(f"target manifest {where}: cannot read it: {err.strerror or err}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"target manifest {where}: not JSON ({err}); expected the output of `lowerkit backends --json`") from None
    return parse_target(data, where)


def parse_target(data: object, where: str = "target manifest") -> Target:
    """A :class:`Target` from decoded manifest JSON (see :func:`load_target`)."""
    if isinstance(data, dict) and isinstance(data.get("backends"), list):  # a wrapped listing
        data = data["backends"]
    if not isinstance(data, list):
        raise InputError(
            f"{where}: expected a JSON list of backends (the output of `lowerkit backends --json`), "
            f"got {type(data).__name__}"
        )
    found: dict[str, TargetBackend] = {}
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise InputError(f"{where}: entry {i} should be an object with a \"name\", got {entry!r:.80}")
        versions = entry.get("payload_versions")
        if versions is not None:
            if not isinstance(versions, list) or not all(isinstance(v, (str, int)) for v in versions):
                raise InputError(f"{where}: backend {entry['name']!r}: payload_versions should be a list of strings, got {versions!r:.80}")
            versions = tuple(str(v) for v in versions)
        available = entry.get("available")
        error = entry.get("error")
        if error is None and entry.get("broken") is True:
            error = "listed as broken"
        found[entry["name"]] = TargetBackend(
            entry["name"],
            _text(entry.get("distribution")),
            _text(entry.get("version")),
            available if isinstance(available, bool) else None,
            _text(entry.get("note")),
            None if error is None else str(error),
            versions,
        )
    return Target(where, found)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
