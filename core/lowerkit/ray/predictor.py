"""The callable class Ray Data's ``map_batches`` instantiates once per actor."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..deploy import check
from ..errors import InputError, LowerkitError
from ..serialization import load

__all__ = ["PreflightError", "Predictor"]


class PreflightError(LowerkitError):
    """The file cannot run on this worker; the message is the pre-flight table."""


class Predictor:
    """Runs one method of a saved module on batches of a Ray dataset.

    ``path``: the ``.lkm`` file (readable by every worker). ``method``: the method to run.
    ``inputs``: which column feeds each method input, ``{input_name: column}`` (default: the
    columns named like the inputs). ``outputs``: the output column names (default
    ``["output"]`` for one output, else ``output0, output1, ...``). ``fallback="reference"``:
    run kept originals where a backend cannot. ``keep_columns``: columns copied through
    (default: every column that is not an input).

    The constructor runs the pre-flight first and raises :class:`PreflightError` with its
    table before anything is loaded or processed; then it loads and compiles the file once.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        method: str = "forward",
        inputs: Mapping[str, str] | None = None,
        outputs: Sequence[str] | None = None,
        fallback: str | None = None,
        keep_columns: Sequence[str] | None = None,
    ) -> None:
        report = check(path, fallback=fallback)
        if not report.ok:
            raise PreflightError(f"pre-flight failed on this worker:\n{report}")
        self.module = load(path, fallback=fallback)
        self.method = method
        self.signature = self.module.signature(method)
        names = [n for n, _ in self.signature.inputs]
        self.inputs = dict(inputs) if inputs is not None else {n: n for n in names}
        missing = [n for n in names if n not in self.inputs]
        if missing or set(self.inputs) - set(names):
            raise InputError(
                f"inputs= must map each input of method {method!r} ({names}) to a column, got {dict(self.inputs)}"
            )
        count = len(self.signature.outputs)
        self.outputs = list(outputs) if outputs is not None else (
            ["output"] if count == 1 else [f"output{i}" for i in range(count)]
        )
        if len(self.outputs) != count:
            raise InputError(f"method {method!r} returns {count} outputs, got {len(self.outputs)} output column names")
        self.keep_columns = None if keep_columns is None else list(keep_columns)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        arrays = []
        for name, expected in self.signature.inputs:
            column = self.inputs[name]
            if column not in batch:
                raise InputError(f"method {self.method!r}, input {name!r}: the batch has no column {column!r}; it has {sorted(batch)}")
            arrays.append(_as_array(batch[column], expected.numpy_dtype))
        result = self.module.run(self.method, *arrays)
        results = result if isinstance(result, tuple) else (result,)
        out: dict[str, np.ndarray] = {}
        keep = self.keep_columns
        if keep is None:
            keep = [c for c in batch if c not in self.inputs.values()]
        for c in keep:
            out[c] = np.asarray(batch[c])
        for name, array in zip(self.outputs, results):
            out[name] = array
        return out


def _as_array(column: Any, dtype: np.dtype) -> np.ndarray:
    """A batch column as one array: tensor columns come as ndarrays, list columns as objects."""
    array = _stack(column)
    return array.astype(dtype, copy=False) if array.dtype != dtype and array.dtype.kind == np.dtype(dtype).kind else array


def _stack(column: Any) -> np.ndarray:
    array = np.asarray(column)
    if array.dtype == object and array.ndim >= 1 and len(array):
        array = np.stack([_stack(row) for row in array])
    return array
