"""``lowerkit inspect``: describe a saved file without compiling anything in it."""

from __future__ import annotations

import json
from typing import Any

from ..lowering.lowered import LoweredModule
from ..backend.registry import backends
from ..errors import FormatError

__all__ = ["describe_file", "read_uncompiled"]


def _read(path: str) -> tuple[tuple[int, int], int, Any]:
    """(format version, file size, object) without compiling anything."""
    from ..serialization import decode, file_format_error
    from ..serialization.container import read_file

    data = read_file(path)
    try:
        decoded = decode(data, rebuild=LoweredModule.uncompiled)
    except FormatError as err:  # name the file, as lowerkit.load does
        raise file_format_error(path, err) from err.__cause__
    return decoded.version, len(data), decoded.obj


def read_uncompiled(path: str) -> Any:
    """The module a file holds, nothing compiled (for drawing)."""
    return _read(path)[2]


def describe_file(path: str) -> str:
    """Format version, then the module's IR and every lowered part (backend, payload, spec)."""
    version, size, obj = _read(path)
    installed = {b.name: b for b in backends(check=False)}
    lines = [f"file: {path} ({size} bytes), lowerkit format {version[0]}.{version[1]}"]
    outer = _partition_outer(obj)
    if outer is not None:
        lines.append(f"content: a module partitioned over backends {obj.backend} ({obj.name})")
        lines.append(f"compile spec: {json.dumps(obj.compile_spec, sort_keys=True)}")
        kept = all(r.original is not None for r in obj.regions.values())
        lines.append(f"regions keep their original nodes: {'yes' if kept else 'no'}")
        lines.append("")
        lines.append(str(outer).rstrip())
        lines.append("")
        lines.append(str(obj.partition_report()))
        for name, sub in _lowered_parts(outer, ""):
            lines.append("")
            lines.append(f"lowered region {name}:")
            lines += _describe_lowered(sub, "  ", installed)
    elif isinstance(obj, LoweredModule):
        lines.append(f"content: a lowered module ({obj.name})")
        lines += _describe_lowered(obj, "", installed)
    else:
        lines.append(f"content: a module ({obj.name})")
        lines.append("")
        lines.append(str(obj).rstrip())
        for name, sub in _lowered_parts(obj, ""):
            lines.append("")
            lines.append(f"lowered submodule {name}:")
            lines += _describe_lowered(sub, "  ", installed)
    return "\n".join(lines)


def _partition_outer(obj: Any) -> Any:
    """The glue module of a partitioned module, or ``None`` for anything else."""
    from ..lowering.partitioned import PartitionedModule

    return obj.outer if isinstance(obj, PartitionedModule) else None


def _lowered_parts(module: Any, prefix: str) -> list[tuple[str, LoweredModule]]:
    found = []
    for name, sub in module.submodules.items():
        qualified = f"{prefix}{name}"
        outer = _partition_outer(sub)
        if outer is not None:
            found += _lowered_parts(outer, qualified + ".")
        elif isinstance(sub, LoweredModule):
            found.append((qualified, sub))
        else:
            found += _lowered_parts(sub, qualified + ".")
    return found


def _backend_description(record: Any) -> str | None:
    """What the installed backend says about the payload; a failing backend says why."""
    from ..backend.registry import get_backend
    from ..errors import LowerkitError

    try:
        return get_backend(record.backend).describe(record.payload)
    except LowerkitError as err:
        return f"(the backend could not describe its payload: {err})"


def _describe_lowered(lowered: LoweredModule, indent: str, installed: dict[str, Any]) -> list[str]:
    record = lowered.record
    here = installed.get(record.backend)
    if here is None:
        state = f"not installed here (install {record.distribution or 'its package'})"
    elif here.note and here.available is False:
        state = f"installed here but {here.note}"
    else:
        state = f"installed here: {here.distribution or 'in-process'} {here.version or ''}".rstrip()
    lines = [
        f"{indent}backend: {record.backend}",
        f"{indent}made with: {record.distribution or '-'} {record.version or '-'}",
        f"{indent}{state}",
        f"{indent}payload: {len(record.payload)} bytes",
        f"{indent}compile spec: {json.dumps(record.compile_spec, sort_keys=True)}",
        f"{indent}methods:",
    ]
    lines += [f"{indent}  {name}{sig}" for name, sig in record.signatures.items()]
    described = _backend_description(record) if here is not None else None
    if described:
        lines.append(f"{indent}described by the backend:")
        lines += [f"{indent}  {line}" if line else "" for line in described.rstrip().splitlines()]
    if record.extra:
        lines.append(f"{indent}extra: {json.dumps(record.extra, sort_keys=True)}")
    if record.original is not None:
        lines.append(f"{indent}kept original module:")
        lines += [f"{indent}  {line}" if line else "" for line in str(record.original).rstrip().splitlines()]
    else:
        lines.append(f"{indent}original module: not kept")
    return lines
