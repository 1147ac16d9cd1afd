"""Fixtures for the nnpack tests (the oracles live in tests/nnpack/oracles.py)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
