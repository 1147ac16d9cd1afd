"""``lowerkit batch``: run a saved module over a dataset on Ray (see lowerkit.ray)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("batch", help="run a saved module over Parquet or a folder of .npy/.npz on Ray")
    p.add_argument("file", help="a .lkm file")
    p.add_argument("--input", required=True, metavar="DATA", help="a Parquet file/folder, or a folder of .npy/.npz")
    p.add_argument("--output", required=True, metavar="OUT", help="output folder (Parquet, or .npz when the input is numpy)")
    p.add_argument("--workers", type=int, default=1, help="actors, each loading and compiling the file once")
    p.add_argument("--batch-size", type=int, default=256, help="rows per batch")
    p.add_argument("--method", default="forward")
    p.add_argument("--fallback", choices=["reference"], help="run kept originals where a backend cannot")
    p.add_argument("--address", help="a running Ray cluster (default: a local Ray instance)")
    p.add_argument("--num-cpus", type=int, help="CPUs of the local Ray instance")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..ray.batch import run_batch

    summary = run_batch(
        args.file, args.input, args.output, workers=args.workers, batch_size=args.batch_size,
        method=args.method, fallback=args.fallback, address=args.address, num_cpus=args.num_cpus,
        progress=not getattr(args, "quiet", False),
    )
    print(summary)
    return 0
