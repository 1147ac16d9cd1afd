"""docs/autograd.md: the derivatives table is current and the examples run as written."""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "autograd.md"


def test_derivatives_table_is_current():
    spec = importlib.util.spec_from_file_location("gen_derivatives_table", ROOT / "scripts" / "gen_derivatives_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.derivatives_table() in DOC.read_text(encoding="utf-8"), (
        "docs/autograd.md derivatives table is stale: run `python scripts/gen_derivatives_table.py --write`"
    )


def test_examples_run(tmp_path, monkeypatch):
    pytest.importorskip("lowerkit_reference")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    for i, code in enumerate(blocks):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, f"docs/autograd.md block {i}", "exec"), {})  # noqa: S102 (our own docs)
    assert os.path.exists(tmp_path / "train_step.lkm")
