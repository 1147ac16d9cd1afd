"""CLI commands for deploying: ``check`` and ``requirements`` (``batch`` is in ``batch_command``)."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parsers", "cmd_check", "cmd_requirements"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="pre-flight a saved file here or on a target: can every backend run it?")
    p.add_argument("file", help="a .lkm file")
    p.add_argument("--target", metavar="MANIFEST", help="JSON from `lowerkit backends --json` on the target")
    p.add_argument("--fallback", choices=["reference"], help="count regions a fallback would run as covered")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("requirements", help="pip requirement lines for the backends a saved file needs")
    p.add_argument("file", help="a .lkm file")
    p.add_argument("--diff", action="store_true", help="only what this environment lacks")
    p.add_argument("--source-dir", metavar="DIR", help="local references into DIR/<backend> (a checkout's plugins/)")
    p.set_defaults(func=cmd_requirements)


def cmd_check(args: argparse.Namespace) -> int:
    from ..deploy import check

    report = check(args.file, args.target, fallback=args.fallback)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return 0 if report.ok else 1


def cmd_requirements(args: argparse.Namespace) -> int:
    from ..deploy import requirements

    lines = requirements(args.file, diff=args.diff, source_dir=args.source_dir)
    for line in lines:
        print(line)
    if args.diff and not lines:
        print("# this environment has everything the file needs", file=sys.stderr)
    return 0
