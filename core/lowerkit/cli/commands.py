"""The CLI's commands: each takes the parsed arguments and returns an exit code."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailableWarning, InputError

__all__ = ["cmd_backends", "cmd_demo", "cmd_inspect", "cmd_lower", "cmd_run", "cmd_version"]


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def cmd_backends(args: argparse.Namespace) -> int:
    from ..backend.registry import backends

    infos = backends()
    if args.json:
        print(json.dumps([b.as_dict() for b in infos], indent=2))
        return 0
    rows = [("NAME", "DISTRIBUTION", "VERSION", "AVAILABLE", "NOTE")]
    for b in infos:
        state = "broken" if b.broken else ("yes" if b.available else "no")
        rows.append((b.name, b.distribution or "(in-process)", b.version or "-", state, b.error or b.note))
    print(_table(rows))
    return 0


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


def _parse_spec(text: str | None) -> dict[str, Any] | None:
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


def _parse_shapes(items: list[str]) -> dict[str, list[int]]:
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


def cmd_lower(args: argparse.Namespace) -> int:
    import lowerkit as lk

    module = load_model(args.model, _parse_shapes(args.input_shape))
    names = _split(args.backend)
    if not names:
        raise InputError(f"-b expects a backend name or NAME,NAME2, got {args.backend!r}")
    submodules = _split(args.submodules) if args.submodules else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendUnavailableWarning)
        lowered = lk.to_backend(
            module,
            names[0] if len(names) == 1 else names,
            _parse_spec(args.spec),
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
    if args.json or args.report:
        if report is None:
            raise InputError("--report and --json describe a partition: give several backends or --submodules")
        print(json.dumps(report.to_json(), indent=2) if args.json else report)
    size = Path(args.output).stat().st_size
    print(f"lowered {args.model} to {','.join(names)}: {args.output} ({size} bytes)",
          file=sys.stderr if args.json else sys.stdout)
    return 0


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_NPY_MAGIC = b"\x93NUMPY"


def _read_inputs(items: list[str], sig: Any, method: str) -> list[np.ndarray]:
    expected = [name for name, _ in sig.inputs]
    given: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise InputError(f"--input expects NAME=FILE.npy, got {item!r}")
        if name not in expected:
            raise InputError(f"method {method!r} has no input {name!r}; its inputs are {expected}")
        if name in given:
            raise InputError(f"--input {name} is given twice; give each of {expected} once")
        given[name] = _read_npy(name, path)
    missing = [f"{n} ({t})" for n, t in sig.inputs if n not in given]
    if missing:
        raise InputError(f"method {method!r} needs --input for {', '.join(missing)}")
    return [given[n] for n in expected]


def _read_npy(name: str, path: str) -> np.ndarray:
    """One ``--input`` array; anything but a readable .npy file is an ``InputError``."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_NPY_MAGIC))
            f.seek(0)
            array = np.load(f, allow_pickle=False) if head == _NPY_MAGIC else None
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise InputError(f"--input {name}: cannot read {path} as a .npy array: {reason}") from None
    if array is None:
        kind = "an .npz archive; give one .npy file per input" if head.startswith(b"PK") else (
            f"it starts with {head!r}, expected {_NPY_MAGIC!r}"
        )
        raise InputError(f"--input {name}: {path} is not a .npy file ({kind})")
    return array


def cmd_run(args: argparse.Namespace) -> int:
    import lowerkit as lk

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BackendUnavailableWarning)
        obj = lk.load(args.file, fallback=args.fallback)
    for w in caught:
        print(f"lowerkit: warning: {w.message}", file=sys.stderr)
    sig = obj.signature(args.method)
    result = obj.run(args.method, *_read_inputs(args.input, sig, args.method))
    outputs = result if isinstance(result, tuple) else (result,)
    for i, out in enumerate(outputs):
        stats = ""
        if out.size and np.issubdtype(out.dtype, np.number):
            stats = f"  min {out.min():.6g}  max {out.max():.6g}  mean {out.mean():.6g}"
        print(f"output{i}: {out.dtype}{list(out.shape)}{stats}")
    if args.output:
        with open(args.output, "wb") as f:
            np.savez(f, **{f"output{i}": out for i, out in enumerate(outputs)})
        print(f"saved {len(outputs)} output(s) to {args.output}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ._inspect import describe_file, partition_dot

    print(partition_dot(args.file) if args.dot else describe_file(args.file), end="" if args.dot else "\n")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.out, model=args.model, repeats=args.repeats, small=args.small, image_size=args.image_size)
