"""Rows/s of lowerkit.ray.Predictor on a local Ray instance, 1 and 2 actors, same run.

    python benchmarks/ray_batch.py [--rows 4000] [--batch-size 256] [--backend glow_like]

Prints rows/s per actor count (actor start-up and compile included: that is what a job
pays) and the in-process rate of the same module for scale. Only same-run ratios count.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import lowerkit as lk
import lowerkit.ray
from lowerkit import models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--backend", default="glow_like")
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()

    import ray
    from lowerkit.ray.batch import dataset_from_columns

    module = lk.trace(models.small_cnn(), models.example_input("small_cnn", 1), dynamic_batch=True)
    path = Path(tempfile.mkdtemp()) / "small_cnn.lkm"
    lk.save(lk.to_backend(module, args.backend, {"forward": {"threads": 1}} if args.backend == "glow_like" else None), path)
    x = models.example_input("small_cnn", args.rows, seed=1)

    loaded = lk.load(path)
    start = time.perf_counter()
    for i in range(0, args.rows, args.batch_size):
        loaded(x[i : i + args.batch_size])
    direct = args.rows / (time.perf_counter() - start)

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    rates = {}
    for actors in (1, 2):
        ds = dataset_from_columns({"x": x}, blocks=8).materialize()
        start = time.perf_counter()
        out = ds.map_batches(lk.ray.Predictor, fn_constructor_kwargs={"path": str(path)},
                             concurrency=actors, batch_size=args.batch_size)
        rows = sum(len(b["output"]) for b in out.iter_batches(batch_size=None))
        rates[actors] = rows / (time.perf_counter() - start)
    ray.shutdown()
    print(f"small_cnn on {args.backend}, {args.rows} rows, batch {args.batch_size}, Ray with {args.cpus} CPUs")
    print(f"  in-process (one thread, no Ray)  {direct:10.0f} rows/s")
    for actors, rate in rates.items():
        print(f"  Ray Data, {actors} actor(s)           {rate:10.0f} rows/s")
    print(f"  2 actors / 1 actor: {rates[2] / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
