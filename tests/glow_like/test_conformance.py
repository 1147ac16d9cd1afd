"""lowerkit's conformance kit run against glow_like (every fp32 op it claims)."""

from __future__ import annotations

import pytest

pytest.importorskip("lowerkit_glow_like")

from lowerkit.opset import all_schemas  # noqa: E402
from lowerkit.testing import BackendConformance  # noqa: E402


class TestGlowLikeConformance(BackendConformance):
    backend_name = "glow_like"
    supported_ops = frozenset(s.name for s in all_schemas() if s.name not in ("call", "param", "constant"))
    rtol, atol = 1e-4, 1e-5
