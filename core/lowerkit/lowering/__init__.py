"""Lowering: ``to_backend``, the lowered and partitioned modules, and the eager runtime
that runs un-lowered modules on ``reference`` (installed into the IR's call hooks here)."""

from __future__ import annotations

from .lowered import DelegateRecord, Lowered, LoweredModule
from .partitioned import PartitionedModule
from .runtime import run_module_method
from .to_backend import to_backend

__all__ = ["DelegateRecord", "Lowered", "LoweredModule", "PartitionedModule", "run_module_method", "to_backend"]
