"""What a saved file needs: one entry per region (a module lowered to one backend)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..ir.module import GraphMethod, Module
from ..lowering.lowered import DelegateRecord, LoweredModule
from ..lowering.partitioned import PartitionedModule

__all__ = ["Need", "needs_of", "read_needs"]

_STRUCTURAL = ("param", "constant", "call")


@dataclass(frozen=True, slots=True)
class Need:
    """One region of a file and the backend it was made for."""

    region: str  # "" for a whole lowered module, else the region's (submodule) path
    backend: str
    distribution: str = ""
    version: str = ""  # of the backend's distribution, at preprocess time
    payload_version: str = ""  # "" when the backend did not say, or an older file
    has_original: bool = False  # a fallback can run it
    unlowered: bool = False  # un-lowered nodes, run by lowerkit on reference

    @classmethod
    def of_record(cls, region: str, record: DelegateRecord) -> Need:
        return cls(
            region, record.backend, record.distribution, record.version,
            record.payload_version, record.original is not None,
        )


def read_needs(path: str | os.PathLike[str] | bytes) -> list[Need]:
    """The needs of a saved file (a path or its bytes); reads it without compiling anything."""
    from ..serialization import decode, read_file

    data = path if isinstance(path, bytes) else read_file(path)
    return needs_of(decode(data, rebuild=LoweredModule.uncompiled).obj)


def needs_of(obj: Any, prefix: str = "") -> list[Need]:
    """The needs of a module, lowered module or partitioned module (not compiled by this)."""
    if isinstance(obj, LoweredModule):
        return [Need.of_record(prefix, obj.record)]
    if isinstance(obj, PartitionedModule):
        needs = _unlowered(obj.outer, prefix or "(glue)")
        for name, region in obj.regions.items():
            needs += needs_of(region, f"{prefix}.{name}" if prefix else name)
        return needs
    if isinstance(obj, Module):
        needs = _unlowered(obj, prefix or "(module)")
        for name, sub in obj.submodules.items():
            needs += needs_of(sub, f"{prefix}.{name}" if prefix else name)
        return needs
    raise InputError(f"expected a lowerkit module or lowered module, got {type(obj).__name__}")


def _unlowered(module: Module, region: str) -> list[Need]:
    """An un-lowered module with compute nodes runs them on ``reference``."""
    for method in module.methods.values():
        if isinstance(method, GraphMethod) and any(n.op not in _STRUCTURAL for n in method.graph.nodes):
            return [Need(region, "reference", "lowerkit-reference", unlowered=True)]
    return []
