"""``lowerkit batch``: a saved module over Parquet or a folder of ``.npy``/``.npz``, on Ray.

Numpy input: every ``.npy`` file of the folder is one column (its stem names it; rows along
axis 0); every ``.npz`` holds columns by key, and files are concatenated in name order.
Outputs are written as ``OUT/<column>.npy`` for numpy input, or as ``OUT/part-00000.parquet``
(tensor columns as nested lists) for Parquet input. Rows keep their order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .predictor import Predictor

__all__ = ["BatchSummary", "read_numpy_folder", "run_batch"]


@dataclass(frozen=True, slots=True)
class BatchSummary:
    rows: int
    seconds: float
    workers: int
    output: str

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        return (f"{self.rows} rows in {self.seconds:.2f} s ({self.rows_per_second:.0f} rows/s) "
                f"with {self.workers} worker(s); outputs in {self.output}")


def _require_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise InputError("lowerkit batch needs Ray Data: pip install 'lowerkit[ray]'") from None
    return ray


def read_numpy_folder(folder: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The columns of a folder of ``.npy``/``.npz`` files (see the module docstring)."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: expected a folder of .npy/.npz files or a Parquet file")
    columns: dict[str, list[np.ndarray]] = {}
    files = sorted(p for p in root.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise InputError(f"{root}: no .npy or .npz files")
    for p in files:
        if p.suffix == ".npy":
            columns.setdefault(p.stem, []).append(np.load(p, allow_pickle=False))
        else:
            with np.load(p, allow_pickle=False) as data:
                for key in data.files:
                    columns.setdefault(key, []).append(data[key])
    merged = {k: np.concatenate(v) if len(v) > 1 else v[0] for k, v in columns.items()}
    rows = {k: len(v) for k, v in merged.items()}
    if len(set(rows.values())) != 1:
        raise InputError(f"{root}: columns have different row counts: {rows}")
    return merged


def dataset_from_columns(columns: dict[str, np.ndarray], blocks: int = 8) -> Any:
    """A Ray dataset with one (tensor) column per array, in ``blocks`` blocks (so that
    several actors get work)."""
    _require_ray()
    import pyarrow as pa
    import ray.data
    from ray.data.extensions import ArrowTensorArray

    table = pa.table({
        k: (ArrowTensorArray.from_numpy(v) if v.ndim > 1 else pa.array(v)) for k, v in columns.items()
    })
    step = max(1, -(-table.num_rows // max(1, blocks)))
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])


def run_batch(
    file: str | os.PathLike[str],
    data: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    workers: int = 1,
    batch_size: int = 256,
    method: str = "forward",
    fallback: str | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    progress: bool = False,
) -> BatchSummary:
    """Run ``method`` of ``file`` over ``data``, writing ``output`` (see the module docstring).

    Starts a local Ray instance unless Ray is already initialised or ``address`` names a
    running cluster. Fails before any batch when the pre-flight fails on the workers.
    """
    import time

    if workers < 1 or batch_size < 1:
        raise InputError(f"--workers and --batch-size must be >= 1, got {workers} and {batch_size}")
    ray = _require_ray()
    from ..deploy import check

    report = check(file, fallback=fallback)  # on the driver too: fail fast with the table
    if not report.ok:
        raise InputError(f"pre-flight failed:\n{report}")
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    source = Path(data)
    numpy_input = source.is_dir() and any(p.suffix in (".npy", ".npz") for p in source.iterdir())
    if numpy_input:
        ds = dataset_from_columns(read_numpy_folder(source), blocks=max(2 * workers, 2))
    else:
        ds = ray.data.read_parquet(os.fspath(source))
    total = ds.count()
    start = time.perf_counter()
    out = ds.map_batches(
        Predictor, fn_constructor_kwargs={"path": os.fspath(file), "method": method, "fallback": fallback},
        concurrency=workers, batch_size=batch_size, batch_format="numpy",
    )
    parts: dict[str, list[np.ndarray]] = {}
    bar = _progress(total, progress)
    for batch in out.iter_batches(batch_size=batch_size, batch_format="numpy"):
        for k, v in batch.items():
            parts.setdefault(k, []).append(np.asarray(v))
        bar.update(len(next(iter(batch.values()))) if batch else 0)
    bar.close()
    seconds = time.perf_counter() - start
    columns = {k: np.concatenate(v) for k, v in parts.items()}
    target = Path(output)
    target.mkdir(parents=True, exist_ok=True)
    if numpy_input:
        for k, v in columns.items():
            np.save(target / f"{k}.npy", v)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({k: _arrow_column(v) for k, v in columns.items()}), target / "part-00000.parquet")
    return BatchSummary(total, seconds, workers, os.fspath(target))


def _arrow_column(v: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(v.tolist()) if v.ndim > 1 else pa.array(v)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, show: bool) -> Any:
    if not show:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with ray[data]
        return _NoBar()
    return tqdm(total=total, unit="rows", desc="lowerkit batch")
