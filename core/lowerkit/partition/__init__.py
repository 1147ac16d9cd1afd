"""Partitioning: lowering one module to several backends (see docs/partitioning.md).

Planning only: assign each node to a backend, form regions, extract them as modules and
describe the result (:class:`PartitionReport`). The partitioned module that runs a plan is
:class:`lowerkit.lowering.partitioned.PartitionedModule`.
"""

from __future__ import annotations

from .report import Measurement, NodeDecision, PartitionReport, RegionSummary

__all__ = ["Measurement", "NodeDecision", "PartitionReport", "RegionSummary"]
