"""``lowerkit inspect``: describe a saved file, or draw it (--dot, --svg)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show what a saved file holds")
    p.add_argument("file", metavar="FILE", help="a saved module (.lkm)")
    p.add_argument("--dot", action="store_true",
                   help="print a Graphviz drawing: inputs, nodes, outputs; one colour per backend")
    p.add_argument("--svg", metavar="OUT.svg", help="render the drawing to an SVG file (needs Graphviz's dot)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ._inspect import describe_file, read_uncompiled
    from .dot import module_dot, render_svg

    if not (args.dot or args.svg):
        print(describe_file(args.file))
        return 0
    text = module_dot(read_uncompiled(args.file))
    if args.svg:
        render_svg(text, args.svg)
        print(f"drew {args.file} to {args.svg}")
    if args.dot:
        print(text, end="")
    return 0
