"""``lowerkit lower``: lower a saved module or an ONNX model to backends and save it."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableWarning, InputError

__all__ = ["load_model", "parse_shapes", "register", "run", "split_names"]


def register(sub: Any) -> None:
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
    p.set_defaults(func=run)


def load_model(path: str, input_shapes: dict[str, list[int]] | None = None) -> Any:
    """A model to lower: a saved module (``.lkm``), or an ONNX model (``.onnx``)."""
    import lowerkit as lk

    if path.lower().endswith(".onnx"):
        from .. import onnx as lk_onnx

        return lk_onnx.load(path, input_shapes=input_shapes or None)
    if input_shapes:
        raise InputError("--input-shape applies to ONNX models only")
    model = lk.load(path)
    if not isinstance(model, lk.Module):
        raise InputError(f"{path} holds a module already lowered to {model.backend!r}; lower the original")
    return model


def parse_spec(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    source = "--spec"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise InputError(f"--spec @{source}: cannot read {source}: {reason}") from None
    try:
        spec = json.loads(text)
    except ValueError as err:
        raise InputError(f"{source} is not valid JSON: {err}") from None
    if not isinstance(spec, dict):
        raise InputError(f'{source} must be a JSON object like {{"forward": {{"threads": 2}}}}')
    return spec


def parse_shapes(items: list[str]) -> dict[str, list[int]]:
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise InputError(f"--input-shape expects NAME=D,D,... (e.g. x=1,3,224,224), got {item!r}") from None
    return shapes


def split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run(args: argparse.Namespace) -> int:
    import lowerkit as lk

    names = split_names(args.backend)
    if not names:
        raise InputError(f"-b expects a backend name or NAME,NAME2, got {args.backend!r}")
    submodules = split_names(args.submodules) if args.submodules else None
    if (args.json or args.report) and len(names) == 1 and not submodules:
        # Checked before any work: a single-backend lowering has no partition to report.
        raise InputError("--report and --json describe a partition: give several backends (-b A,B) "
                         "or --submodules")
    spec = parse_spec(args.spec)
    module = load_model(args.model, parse_shapes(args.input_shape))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendUnavailableWarning)
        lowered = lk.to_backend(
            module,
            names[0] if len(names) == 1 else names,
            spec,
            keep_source=args.keep_source,
            submodules=submodules,
        )
    for w in caught:
        if issubclass(w.category, BackendUnavailableWarning):
            print(f"lowerkit: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    lk.save(lowered, args.output)
    report = lowered.partition_report() if hasattr(lowered, "partition_report") else None
    if report is not None and (args.json or args.report):
        print(json.dumps(report.to_json(), indent=2) if args.json else report)
    size = Path(args.output).stat().st_size
    print(f"lowered {args.model} to {','.join(names)}: {args.output} ({size} bytes)",
          file=sys.stderr if args.json else sys.stdout)
    return 0
