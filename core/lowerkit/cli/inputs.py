"""Reading and writing arrays for ``run`` and ``bench``: ``--input NAME=FILE.npy``, ``--cast``, ``-o``."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["check_dtypes", "read_inputs", "read_npy", "write_outputs"]

_NPY_MAGIC = b"\x93NUMPY"


def read_inputs(items: list[str], sig: Any, method: str, *, required: bool = True) -> dict[str, np.ndarray]:
    """``--input NAME=FILE.npy`` flags as ``{name: array}``; all inputs when ``required``."""
    expected = [name for name, _ in sig.inputs]
    given: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--input expects NAME=FILE.npy, got {item!r}")
        if name not in expected:
            raise InputError(f"method {method!r} has no input {name!r}; its inputs are {expected} (--input {item})")
        if name in given:
            raise InputError(f"--input {name} is given twice; give each of {expected} once")
        given[name] = read_npy(name, path)
    missing = [f"{n} ({t})" for n, t in sig.inputs if n not in given]
    if missing and required:
        raise InputError(f"method {method!r} needs --input for {', '.join(missing)}")
    return given


def read_npy(name: str, path: str) -> np.ndarray:
    """One ``--input`` array; anything but a readable .npy file is an ``InputError``."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_NPY_MAGIC))
            f.seek(0)
            array = np.load(f, allow_pickle=False) if head == _NPY_MAGIC else None
    except (OSError, ValueError, EOFError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise InputError(f"--input {name}: cannot read {path} as a .npy array: {reason}") from None
    if array is None:
        kind = "an .npz archive; give one .npy file per input" if head.startswith(b"PK") else (
            f"it starts with {head!r}, expected {_NPY_MAGIC!r}"
        )
        raise InputError(f"--input {name}: {path} is not a .npy file ({kind})")
    return array


def check_dtypes(given: dict[str, np.ndarray], sig: Any, cast: bool) -> dict[str, np.ndarray]:
    """Inputs of another float type: cast with ``--cast``, else an error that suggests it."""
    out = dict(given)
    for name, expected in sig.inputs:
        array = given.get(name)
        if array is None or array.dtype == expected.numpy_dtype:
            continue
        floats = array.dtype.kind == "f" and np.dtype(expected.numpy_dtype).kind == "f"
        if floats and cast:
            out[name] = array.astype(expected.numpy_dtype)
        elif floats:
            raise InputError(
                f"--input {name}: the method takes {expected}, the file holds {array.dtype}"
                f"{list(array.shape)}; add --cast to convert it to {expected.dtype}"
            )
        else:
            raise InputError(
                f"--input {name}: the method takes {expected}, the file holds {array.dtype}"
                f"{list(array.shape)} (--cast converts between float types only)"
            )
    return out


def write_outputs(path: str, outputs: dict[str, np.ndarray]) -> str:
    """Save outputs: ``.npy`` for exactly one, else an ``.npz`` keyed by output name.

    The archive is built in memory first, so a destination that cannot seek (``/dev/null``,
    a pipe) works, and a failed write leaves no half-written archive.
    """
    buffer = io.BytesIO()
    if path.lower().endswith(".npy"):
        if len(outputs) != 1:
            raise InputError(
                f"-o {path}: a .npy file holds one array, the method has {len(outputs)} outputs "
                f"{list(outputs)}; pick one with --output-name NAME, or write an .npz"
            )
        np.save(buffer, next(iter(outputs.values())), allow_pickle=False)
        kind = "npy"
    else:
        # zipfile, not np.savez: an output may be called "file" or "allow_pickle".
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for name, array in outputs.items():
                with archive.open(f"{name}.npy", "w") as member:
                    np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
        kind = "npz"
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
    return kind
