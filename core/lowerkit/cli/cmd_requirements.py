"""``lowerkit requirements``: pip requirement lines for the backends a saved file needs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("requirements", help="pip requirement lines for the backends a saved file needs")
    p.add_argument("file", help="a .lkm file")
    p.add_argument("--diff", action="store_true", help="only what this environment lacks")
    p.add_argument("--source-dir", metavar="DIR", help="local references into DIR/<backend> (a checkout's plugins/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..deploy import requirements

    lines = requirements(args.file, diff=args.diff, source_dir=args.source_dir)
    for line in lines:
        print(line)
    if args.diff and not lines:
        print("# this environment has everything the file needs", file=sys.stderr)
    return 0
