"""lowerkit.passes sits right above the IR: it imports only errors, ir and opset from lowerkit."""

from __future__ import annotations

import ast
from pathlib import Path

import lowerkit.passes

ALLOWED = {"errors", "ir", "opset", "passes"}


def test_passes_import_only_the_layers_below():
    root = Path(lowerkit.passes.__file__).parent
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    continue  # inside lowerkit.passes
                if node.level == 2:
                    target = (node.module or "").split(".")[0]
                elif (node.module or "").startswith("lowerkit"):
                    target = (node.module or "lowerkit.").split(".")[1] if "." in node.module else ""
                else:
                    continue
                assert target in ALLOWED, f"{path.name} imports lowerkit.{target}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("lowerkit_"), f"{path.name} imports plugin {alias.name}"
                    if alias.name.startswith("lowerkit."):
                        assert alias.name.split(".")[1] in ALLOWED, f"{path.name} imports {alias.name}"
