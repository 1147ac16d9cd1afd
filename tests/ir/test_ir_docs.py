"""docs/ir.md carries the op table generated from the registry; keep it current."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_op_table_in_docs_is_current():
    spec = importlib.util.spec_from_file_location("gen_op_table", ROOT / "scripts" / "gen_op_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.op_table()
    doc = (ROOT / "docs" / "ir.md").read_text(encoding="utf-8")
    assert table in doc, "docs/ir.md op table is stale: run `python scripts/gen_op_table.py` and paste it"
