"""The first example of docs/passes.md runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "passes.md"


def test_pipeline_example_runs(capsys):
    pytest.importorskip("lowerkit_reference")
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[0]
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)
    assert [n.op for n in scope["g"].nodes] == ["constant", "add", "mul"]
    assert "fold_constants" in scope["fired"]
    assert "round 1: eliminate_common_subexpressions" in capsys.readouterr().out
