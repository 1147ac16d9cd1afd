"""The CLI's commands: one module per command, each with ``register(subparsers)``.

A command module adds its parser in ``register`` and sets ``func`` to a function taking the
parsed arguments and returning an exit code. To add a command, write ``cmd_NAME.py`` and
list it in :data:`COMMANDS` (order is the order of ``lowerkit --help``).
"""

from __future__ import annotations

import argparse
from types import ModuleType

from . import (
    cmd_backends,
    cmd_batch,
    cmd_bench,
    cmd_check,
    cmd_demo,
    cmd_inspect,
    cmd_lower,
    cmd_requirements,
    cmd_run,
)

__all__ = ["COMMANDS", "cmd_version"]

COMMANDS: tuple[ModuleType, ...] = (
    cmd_backends, cmd_lower, cmd_run, cmd_bench, cmd_inspect, cmd_check, cmd_requirements, cmd_batch, cmd_demo,
)


def cmd_version(args: argparse.Namespace) -> int:
    import lowerkit

    from ..backend.registry import backends

    print(f"lowerkit {lowerkit.__version__}")
    infos = backends(check=False)
    if not infos:
        print("no backends installed")
    for b in infos:
        print(f"  {b.name} {b.version or '-'} ({b.distribution or 'in-process'})")
    return 0
