"""Settings every test starts from."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _panel_rules_of_avx2(monkeypatch):
    """The panel GEMM's rules of an AVX2 machine (``lowerkit.backend.cpu.panels.fits``) on
    any machine: the tests of its paths then run everywhere, also where the CPU has AVX-512
    and the layers would take BLAS's sgemm instead, or where the panel GEMM's wide tile would take
    them all. Tests of those rules set them."""
    from lowerkit.backend.cpu import panels

    monkeypatch.setattr(panels, "_RULES", ["avx2"])
    monkeypatch.delenv(panels.RULES_ENV, raising=False)
