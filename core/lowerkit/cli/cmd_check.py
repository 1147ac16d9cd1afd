"""``lowerkit check``: pre-flight a saved file here or on a target (can every backend run it?)."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("check", help="pre-flight a saved file here or on a target: can every backend run it?")
    p.add_argument("file", help="a .lkm file")
    p.add_argument("--target", metavar="MANIFEST", help="JSON from `lowerkit backends --json` on the target")
    p.add_argument("--fallback", choices=["reference"], help="count regions a fallback would run as covered")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..deploy import check

    report = check(args.file, args.target, fallback=args.fallback)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return 0 if report.ok else 1
