"""Fixtures for CLI tests: run ``lowerkit`` as a subprocess, with the test distributions
(real dist-info directories) on PYTHONPATH when asked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DISTS = Path(__file__).resolve().parents[1] / "fixtures" / "dists"


@pytest.fixture
def cli(tmp_path):
    """``cli(*args, dists=False, env=None)`` -> CompletedProcess of the installed ``lowerkit``
    command (its PYTHONPATH makes it run this tree), or ``python -m lowerkit.cli`` without one."""
    installed = shutil.which("lowerkit")
    command = [installed] if installed else [sys.executable, "-m", "lowerkit.cli"]

    def run(*args: str, dists: bool = False, env: dict[str, str] | None = None, timeout: float = 120):
        full_env = dict(os.environ)
        full_env.pop("LOWERKIT_DISABLE_PLUGINS", None)
        full_env.pop("LOWERKIT_TOY_UNAVAILABLE", None)
        if dists:
            full_env["PYTHONPATH"] = os.pathsep.join(p for p in [str(DISTS), full_env.get("PYTHONPATH", "")] if p)
        full_env.update(env or {})
        return subprocess.run(
            [*command, *args],
            cwd=tmp_path,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
