"""docs/torch.md: the ATen table is current and the example runs as written."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_aten_table_matches_the_registry():
    spec = importlib.util.spec_from_file_location("gen_torch_table", ROOT / "scripts" / "gen_torch_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = (ROOT / "docs" / "torch.md").read_text()
    assert module.table() in doc, "docs/torch.md ATen table is stale: run `python scripts/gen_torch_table.py --write`"


def test_the_quick_start_runs():
    pytest.importorskip("torch")
    pytest.importorskip("lowerkit_reference")
    doc = (ROOT / "docs" / "torch.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    scope: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "docs/torch.md", "exec"), scope)  # noqa: S102 (our own docs)
    assert scope["y"].shape == (1, 10)
