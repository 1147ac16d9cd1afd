"""``lowerkit run``: run a saved module (or an ONNX model) on .npy inputs."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

import numpy as np

from ..errors import BackendUnavailableWarning, InputError
from .inputs import check_dtypes, read_inputs, write_outputs

__all__ = ["load_runnable", "register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a saved module on .npy inputs")
    p.add_argument("file", metavar="FILE", help="a saved module (.lkm) or an ONNX model (.onnx, runs on reference)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="one per method input")
    p.add_argument("-o", "--output", metavar="OUT.npz|OUT.npy",
                   help="save the outputs: an .npz keyed by output name, or an .npy for one output")
    p.add_argument("--output-name", action="append", default=[], metavar="NAME",
                   help="only these outputs (repeat for several)")
    p.add_argument("--method", default="forward")
    p.add_argument("--cast", action="store_true", help="convert inputs of another float type (f64 -> f32)")
    p.add_argument("--fallback", choices=["reference"], help="run the kept original if the backend is unavailable")
    p.set_defaults(func=run)


def load_runnable(path: str, fallback: str | None = None) -> Any:
    """A module to call: a saved file, or an ONNX model (run on ``reference``)."""
    import lowerkit as lk

    if path.lower().endswith(".onnx"):
        from .cmd_lower import load_model

        return load_model(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendUnavailableWarning)
        obj = lk.load(path, fallback=fallback)
    for w in caught:
        print(f"lowerkit: warning: {w.message}", file=sys.stderr)
    return obj


def _methods_of(obj: Any) -> list[str]:
    return sorted(getattr(obj, "methods", {}))


def check_method(obj: Any, method: str) -> Any:
    if method not in getattr(obj, "methods", {}):
        raise InputError(f"--method {method}: the module has no such method; its methods are {_methods_of(obj)}")
    return obj.signature(method)


def run(args: argparse.Namespace) -> int:
    obj = load_runnable(args.file, args.fallback)
    sig = check_method(obj, args.method)
    names = sig.names_out
    unknown = [n for n in args.output_name if n not in names]
    if unknown:
        raise InputError(f"--output-name {unknown[0]}: method {args.method!r} has outputs {list(names)}")
    wanted = args.output_name or list(names)
    if args.output and args.output.lower().endswith(".npy") and len(wanted) != 1:
        raise InputError(
            f"-o {args.output}: a .npy file holds one array, method {args.method!r} has {len(wanted)} "
            f"outputs {list(wanted)}; pick one with --output-name NAME, or write an .npz"
        )
    given = check_dtypes(read_inputs(args.input, sig, args.method), sig, args.cast)
    result = obj.run(args.method, given)
    outputs = dict(zip(names, result if isinstance(result, tuple) else (result,)))
    chosen = {n: outputs[n] for n in wanted}
    for name, out in chosen.items():
        stats = ""
        if out.size and np.issubdtype(out.dtype, np.number):
            stats = f"  min {out.min():.6g}  max {out.max():.6g}  mean {out.mean():.6g}"
        print(f"{name}: {out.dtype}{list(out.shape)}{stats}")
    if args.output:
        kind = write_outputs(args.output, chosen)
        print(f"saved {len(chosen)} output(s) to {args.output} ({kind})")
    return 0
