"""pip requirement lines for the backends a file needs, from what it recorded."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import InputError
from .needs import Need, needs_of, read_needs

__all__ = ["requirements"]


def requirements(
    file: str | os.PathLike[str] | bytes | Any,
    *,
    diff: bool = False,
    source_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """One pip requirement line per distribution the file's backends came from.

    ``name==version`` as recorded at preprocess time (just the name when the file did not
    record a version). ``diff=True`` keeps only the lines this environment does not satisfy.
    ``source_dir`` (a lowerkit checkout's ``plugins/``) gives local references instead,
    ``name @ file:///.../plugins/<backend>``, for offline installs.
    """
    if isinstance(file, (str, os.PathLike, bytes)):
        needs = read_needs(file)
    else:
        needs = needs_of(file)
    wanted: dict[str, tuple[str, Need]] = {}
    for need in needs:
        if not need.distribution:
            raise InputError(
                f"region {need.region or '(whole)'} on backend {need.backend!r} recorded no "
                f"distribution: cannot say what to install (a backend registered in-process?)"
            )
        for dist in need.distribution.split(", "):
            wanted.setdefault(dist, (need.version, need))
    lines = []
    for dist, (version, need) in sorted(wanted.items()):
        if diff and _satisfied(dist, version):
            continue
        if source_dir is not None:
            folder = Path(source_dir, need.backend).resolve()
            if not (folder / "pyproject.toml").is_file():
                raise InputError(f"{folder} has no pyproject.toml: not the source folder of backend {need.backend!r}")
            lines.append(f"{dist} @ {folder.as_uri()}")
        else:
            lines.append(f"{dist}=={version}" if version and not need.unlowered else dist)
    return lines


def _satisfied(dist: str, version: str) -> bool:
    try:
        installed = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return not version or installed == version
