"""``lowerkit backends``: what is installed, whether it runs here, what it offers."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("backends", help="list installed backends",
                       description="List installed backends: distribution, version, availability, "
                       "and with -v/--json the hooks, options and ops of each.")
    p.add_argument("--json", action="store_true", help="print a JSON list (every detail)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show hooks, options and ops")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when any backend is broken or unavailable (for CI and install checks)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="how long to wait for each backend to answer (default $LOWERKIT_PROBE_TIMEOUT or 5)")
    p.set_defaults(func=run)


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def run(args: argparse.Namespace) -> int:
    from ..backend.registry import backends
    from ..errors import InputError

    if args.timeout is not None and not args.timeout > 0:
        raise InputError(f"--timeout expects a positive number of seconds, got {args.timeout}")
    # The plain table shows no ops: not asking for them keeps the plugins' kernels unimported.
    infos = backends(timeout=args.timeout, ops=args.json or args.verbose)
    if args.json:
        print(json.dumps([b.as_dict() for b in infos], indent=2))
    else:
        rows = [("NAME", "DISTRIBUTION", "VERSION", "AVAILABLE", "NOTE")]
        for b in infos:
            state = "broken" if b.broken else ("yes" if b.available else "no")
            rows.append((b.name, b.distribution or "(in-process)", b.version or "-", state, b.error or b.note))
        print(_table(rows))
        if args.verbose:
            for b in infos:
                print()
                print(_details(b))
    bad = [b.name for b in infos if b.broken or not b.available]
    if args.check and bad:
        print(f"lowerkit: error: --check: broken or unavailable backend(s): {', '.join(bad)}",
              file=__import__("sys").stderr)
        return 1
    return 0


def _details(b: Any) -> str:
    lines = [f"{b.name}:", f"  module: {b.module or '-'}"]
    if b.broken:
        lines.append(f"  broken: {b.error}")
    elif not b.available:
        lines.append(f"  unavailable: {b.note or '(no reason given)'}")
    if b.hooks is not None:
        lines.append(f"  hooks: {', '.join(h.removeprefix('lowerkit_') for h in b.hooks)}")
    if b.options is None:
        lines.append("  options: not declared (no lowerkit_options hook)")
    elif not b.options:
        lines.append("  options: none")
    else:
        lines.append("  options:")
        for o in b.options:
            lines.append(f"    {o['name']} ({o['type']}, default {json.dumps(o['default'])}): {o['doc']}")
    if b.ops is None:
        lines.append("  ops: not declared (no lowerkit_supported_ops hook)" if b.hooks is not None else "  ops: -")
    elif not b.ops:
        lines.append("  ops: whole modules only (no lowerkit_is_supported)")
    else:
        lines.append(f"  ops ({len(b.ops)}): {', '.join(b.ops)}")
    return "\n".join(lines)
