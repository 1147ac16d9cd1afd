"""Partitioning: lowering one module to several backends (see docs/partitioning.md).

``lowerkit.to_backend(module, ["nnpack", "reference"])`` returns a
:class:`PartitionedModule`; its ``partition_report()`` is a :class:`PartitionReport`.
The steps (assign, form regions, extract, plan) live in the submodules.
"""

from __future__ import annotations

from .lowered import PartitionedModule, lower_partitioned
from .report import NodeDecision, PartitionReport, RegionSummary

__all__ = ["NodeDecision", "PartitionReport", "PartitionedModule", "RegionSummary", "lower_partitioned"]
