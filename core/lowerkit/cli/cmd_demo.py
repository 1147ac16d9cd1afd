"""``lowerkit demo``: lower a CNN to the installed backends, save, load, run, compare."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="lower a CNN to the installed backends, save, load, run, compare")
    p.add_argument("--keep", metavar="DIR", help="keep the demo's files in DIR (default: a temporary "
                   "directory, removed at the end)")
    p.add_argument("--out", help=argparse.SUPPRESS)  # the old name of --keep
    p.add_argument("--model", default="resnet18", choices=_ZooNames(), metavar="NAME",
                   help="the zoo model (lowerkit.models.names()): %(choices)s")
    p.add_argument("--small", action="store_true", help="the model's small configuration (fewer blocks, 32x32)")
    p.add_argument("--image-size", type=int, help="input height and width (default: the model's standard size)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per plan (median and spread shown)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.repeats < 1:
        raise InputError(f"--repeats expects a positive number of timed runs, got {args.repeats}")
    return run_demo(args.keep or args.out, model=args.model, repeats=args.repeats, as_json=args.json,
                    small=args.small, image_size=args.image_size)


class _ZooNames:
    """The zoo's model names, looked up only when argparse checks or prints them: importing
    the zoo would cost every other command (``lowerkit backends``) time for nothing."""

    def _names(self) -> list[str]:
        from ..models import names

        return names()

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())
