"""Print the Markdown op table of docs/ir.md from the op registry.

Regenerate the table after adding or changing an op:

    python scripts/gen_op_table.py            # print it
    python scripts/gen_op_table.py --write    # replace the table under "## Op table" in docs/ir.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from lowerkit.autograd.coverage import grad_column
from lowerkit.ir.printer import format_attr
from lowerkit.opset import REQUIRED, OpSchema, all_schemas


def _inputs(schema: OpSchema) -> str:
    names = list(schema.inputs)
    first_optional = len(names) - schema.num_optional
    shown = []
    for i, name in enumerate(names):
        if schema.variadic and i == len(names) - 1:
            shown.append(f"*{name}")
        elif i >= first_optional:
            shown.append(f"{name}?")
        else:
            shown.append(name)
    return ", ".join(shown) or "-"


def _attrs(schema: OpSchema) -> str:
    parts = []
    for spec in schema.attrs:
        if spec.default is REQUIRED:
            parts.append(f"`{spec.name}`: {spec.kind}")
        else:
            parts.append(f"`{spec.name}`: {spec.kind} = `{format_attr(spec.default)}`")  # type: ignore[arg-type]
    return "<br>".join(parts) or "-"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def op_table() -> str:
    """The op table as Markdown, one row per registered op, sorted by name; ``grad`` says whether
    lowerkit.autograd differentiates it (see docs/autograd.md)."""
    rows = ["| op | inputs | attributes | grad | meaning |", "| --- | --- | --- | --- | --- |"]
    for schema in all_schemas():
        rows.append(
            f"| `{schema.name}` | {_inputs(schema)} | {_attrs(schema)} | {grad_column(schema.name)} "
            f"| {_cell(schema.doc)} |"
        )
    return "\n".join(rows)


def write_table(path: Path) -> None:
    """Replace the table under ``## Op table`` in ``path`` (up to the first blank line after it)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    heading = lines.index("## Op table")
    start = next(i for i in range(heading, len(lines)) if lines[i].startswith("| op |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    lines[start:end] = op_table().split("\n")
    path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_table(Path(__file__).resolve().parents[1] / "docs" / "ir.md")
    else:
        print(op_table())
