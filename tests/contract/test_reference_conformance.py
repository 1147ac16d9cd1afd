"""The reference backend passes the conformance kit for every op."""

from __future__ import annotations

from lowerkit.opset import all_schemas
from lowerkit.opset.structural import STRUCTURAL_OPS
from lowerkit.testing import BackendConformance


class TestReferenceConformance(BackendConformance):
    backend_name = "reference"
    supported_ops = frozenset(s.name for s in all_schemas()) - STRUCTURAL_OPS
