"""lowerkit-minimal runs lowerkit's conformance kit against itself (needs it installed)."""

from __future__ import annotations

import pytest

import lowerkit

pytest.importorskip("lowerkit_minimal")
if "minimal" not in lowerkit.backend.registry.backend_names():  # pragma: no cover
    pytest.skip("lowerkit-minimal is importable but not installed", allow_module_level=True)

from lowerkit.testing import BackendConformance  # noqa: E402


class TestMinimalConformance(BackendConformance):
    backend_name = "minimal"
    supported_ops = frozenset({"add", "sub", "mul", "neg", "relu"})
