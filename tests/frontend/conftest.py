"""Fixtures for the front-end tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def reference():
    """Skip (cleanly) when the reference backend package is not installed."""
    return pytest.importorskip("lowerkit_reference")
