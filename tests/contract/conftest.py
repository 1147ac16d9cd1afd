"""Fixtures for the backend-contract tests: the fake backend distributions on sys.path,
and small modules built with the Graph API."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest


DISTS = Path(__file__).resolve().parents[1] / "fixtures" / "dists"


@pytest.fixture
def dists(monkeypatch):
    """Put the test distributions (real dist-info dirs with entry points) on sys.path."""
    monkeypatch.syspath_prepend(str(DISTS))
    monkeypatch.delenv("LOWERKIT_TOY_UNAVAILABLE", raising=False)
    monkeypatch.delenv("LOWERKIT_DISABLE_PLUGINS", raising=False)
    return DISTS


@pytest.fixture
def toy(dists):
    """The ``toy`` backend's module, with its bookkeeping lists emptied."""
    module = importlib.import_module("lowerkit_test_toy")
    module.DESTROYED.clear()
    module.EXECUTED.clear()
    return module


@pytest.fixture
def xh():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32))
