"""The ``lowerkit`` command line: backends, lower, run, bench, inspect, demo.

Exit codes: 0 success, 1 user error (a one-line message; ``--debug`` anywhere on the line
shows the traceback), 2 usage error. No input gives a Python traceback without ``--debug``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import LowerkitError
from . import commands

__all__ = ["build_parser", "main"]

# Global flags accepted anywhere on the line (before or after the command).
_ANYWHERE = {"--debug": "debug", "-q": "quiet", "--quiet": "quiet"}

# Messages written for the Python API, said in the CLI's flags.
_FLAG_SPEAK = (
    ("Pass input_shapes={name: [d0, d1, ...]} for these inputs", "Pass --input-shape NAME=D,D,... for these inputs"),
    ("input_shapes=", "--input-shape "),
    ("keep_source=True", "--keep-source"),
    ('fallback="reference"', "--fallback reference"),
    ("fallback='reference'", "--fallback reference"),
    ("compile_spec=", "--spec "),
    ("submodules=", "--submodules "),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lowerkit", description="Lower neural-network modules to pluggable execution backends."
    )
    parser.add_argument("--version", action="store_true", help="show lowerkit's version and installed backends")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors (anywhere on the line)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines (anywhere on the line)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands.COMMANDS:
        command.register(sub)
    return parser


def _split_global(argv: list[str]) -> tuple[list[str], set[str]]:
    """``argv`` without the global flags, and the flags found (up to a ``--``)."""
    rest, found = [], set()
    for i, arg in enumerate(argv):
        if arg == "--":
            rest += argv[i:]
            break
        if arg in _ANYWHERE:
            found.add(_ANYWHERE[arg])
        else:
            rest.append(arg)
    return rest, found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args_list, flags = _split_global(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(args_list)
    args.debug, args.quiet = "debug" in flags, "quiet" in flags
    if args.quiet:
        from ..progress import set_quiet

        set_quiet(True)
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
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except (LowerkitError, OSError) as err:
        if args.debug:
            raise
        print(f"lowerkit: error: {_one_line(err)}", file=sys.stderr)
        return 1
    except Exception as err:  # a bug, ours or a plugin's: still one line, the traceback on request
        if args.debug:
            raise
        print(f"lowerkit: error: unexpected {type(err).__name__}: {_one_line(err)} "
              "(run again with --debug for the traceback, and please report it)", file=sys.stderr)
        return 1


def _one_line(err: Exception) -> str:
    """The error as one line; a file-system error names the file first, then the reason."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.filename}: {err.strerror}"
    text = " ".join(str(err).split())
    for api, flag in _FLAG_SPEAK:
        text = text.replace(api, flag)
    return text


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at devnull so that flush cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
