"""``lowerkit bench``: latency percentiles and throughput of a saved module."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import InputError
from .inputs import check_dtypes, read_inputs

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time a saved module: latency min/p50/p90/p99 and throughput",
                       description="Time a saved module (or an ONNX model, optionally lowered first "
                       "with -b). Inputs come from --input files or are random, drawn from the "
                       "method's signature.")
    p.add_argument("file", metavar="FILE", help="a saved module (.lkm) or an ONNX model (.onnx)")
    p.add_argument("-b", "--backend", help="lower FILE to this backend (or NAME,NAME2) first, in memory")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input from a file (others are random)")
    p.add_argument("--cast", action="store_true", help="convert inputs of another float type")
    p.add_argument("--method", default="forward")
    p.add_argument("--batch", type=int, metavar="N",
                   help="batch size for random inputs, where the module's batch dimension is free")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed runs first (default 3)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--repeats", type=int, metavar="N", help="timed runs (default 20)")
    group.add_argument("--time", type=float, metavar="SECONDS", help="run for this long instead")
    p.add_argument("--profile", action="store_true", help="also show the time per backend and per region")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .bench import bench, random_inputs
    from .cmd_run import check_method, load_runnable

    obj = load_runnable(args.file)
    if args.backend:
        import lowerkit as lk

        from .cmd_lower import split_names

        names = split_names(args.backend)
        if not names:
            raise InputError(f"-b expects a backend name or NAME,NAME2, got {args.backend!r}")
        if not isinstance(obj, lk.Module):
            raise InputError(f"-b {args.backend}: {args.file} is already lowered to {obj.backend!r}")
        obj = lk.to_backend(obj, names[0] if len(names) == 1 else names)
    sig = check_method(obj, args.method)
    given = check_dtypes(read_inputs(args.input, sig, args.method, required=False), sig, args.cast)
    feed = None
    if given:
        feed = {**random_inputs(sig, args.batch, args.seed), **given}
    result = bench(obj, feed, method=args.method, batch=args.batch, warmup=args.warmup,
                   repeats=args.repeats, seconds=args.time, profile=args.profile, seed=args.seed)
    print(json.dumps(result.as_dict(), indent=2) if args.json else result)
    return 0
