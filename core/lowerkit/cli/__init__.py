"""The ``lowerkit`` command line: backends, lower, run, inspect, demo.

Exit codes: 0 success, 1 user error (a one-line message; ``--debug`` shows the traceback),
2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import LowerkitError
from . import commands

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lowerkit", description="Lower neural-network modules to pluggable execution backends."
    )
    parser.add_argument("--version", action="store_true", help="show lowerkit's version and installed backends")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("backends", help="list installed backends")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=commands.cmd_backends)

    p = sub.add_parser("lower", help="lower a model (.lkm or .onnx) to backends and save it")
    p.add_argument("model", metavar="MODEL", help="a saved lowerkit module (.lkm) or an ONNX model (.onnx)")
    p.add_argument("-b", "--backend", required=True, help="backend name, or NAME,NAME2 to partition")
    p.add_argument("-o", "--output", required=True, help="where to save the lowered module")
    p.add_argument("--spec", help='compile spec as JSON ({"forward": {"threads": 2}}), or @FILE')
    p.add_argument("--keep-source", action="store_true", help="also store the original module (for fallback)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...",
                   help="static shape of an ONNX input with symbolic dims")
    p.add_argument("--submodules", metavar="PATH,PATH2",
                   help="lower only the nodes under these module paths (selective lowering)")
    p.add_argument("--report", action="store_true", help="print the partition report")
    p.add_argument("--json", action="store_true", help="print the partition report as JSON")
    p.set_defaults(func=commands.cmd_lower)

    p = sub.add_parser("run", help="run a saved module on .npy inputs")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="one per method input")
    p.add_argument("-o", "--output", help="save the outputs to an .npz file (output0, output1, ...)")
    p.add_argument("--method", default="forward")
    p.add_argument("--fallback", choices=["reference"], help="run the kept original if the backend is unavailable")
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser("inspect", help="show what a saved file holds")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--dot", action="store_true",
                   help="print a Graphviz drawing of a partitioned module, one colour per backend")
    p.set_defaults(func=commands.cmd_inspect)

    p = sub.add_parser("demo", help="lower a zoo model to the installed backends, save, load, run, compare")
    p.add_argument("--out", help="directory for the demo's files (default: a new temporary one)")
    p.add_argument("--model", default="resnet18", choices=_zoo_names(), metavar="NAME",
                   help="the zoo model (lowerkit.models.names()): " + ", ".join(_zoo_names()))
    p.add_argument("--small", action="store_true", help="the model's small configuration (fewer blocks, 32x32)")
    p.add_argument("--image-size", type=int, help="input height and width (default: the model's standard size)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per plan (median shown)")
    p.set_defaults(func=commands.cmd_demo)
    return parser


def _zoo_names() -> list[str]:
    from ..models import names

    return names()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        return commands.cmd_version(args)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("lowerkit: error: a command is required", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`lowerkit backends | head`): stop quietly
        _silence_stdout()
        return 1
    except (LowerkitError, OSError) as err:
        if args.debug:
            raise
        print(f"lowerkit: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover
        return 130


def _one_line(err: Exception) -> str:
    """The error as one line; a file-system error names the file first, then the reason."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.filename}: {err.strerror}"
    return " ".join(str(err).split())


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at devnull so that flush cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
