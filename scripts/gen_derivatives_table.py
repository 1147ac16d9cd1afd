"""Print the derivatives table of docs/autograd.md from lowerkit.autograd's table.

    python scripts/gen_derivatives_table.py            # print it
    python scripts/gen_derivatives_table.py --write    # replace it under "## The derivatives table"
"""

from __future__ import annotations

import sys
from pathlib import Path

from lowerkit.autograd.coverage import derivatives_table


def write_table(path: Path) -> None:
    """Replace the table under ``## The derivatives table`` in ``path``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    heading = lines.index("## The derivatives table")
    start = next(i for i in range(heading, len(lines)) if lines[i].startswith("| op |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    lines[start:end] = derivatives_table().split("\n")
    path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_table(Path(__file__).resolve().parents[1] / "docs" / "autograd.md")
    else:
        print(derivatives_table())
