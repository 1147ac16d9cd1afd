"""lowerkit's backend conformance kit, run for nnpack."""

from __future__ import annotations

from lowerkit.testing import BackendConformance
from lowerkit_nnpack import CLAIMED_OPS


class TestNnpackConformance(BackendConformance):
    backend_name = "nnpack"
    supported_ops = frozenset(CLAIMED_OPS)
    # wt8x8 is the loosest algorithm (docs/nnpack.md, "Tolerances").
    rtol, atol = 1e-3, 1e-4
    compile_options = {"algorithm": "auto", "threads": 2}
