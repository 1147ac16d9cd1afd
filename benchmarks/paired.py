"""One switch, both ways, in one process: a zoo model lowered twice to the same backends with an
environment variable set to each of two values while compiling and around each of the
handle's calls (``LOWERKIT_CHANNEL_DIRECT``, ``LOWERKIT_TEAM_PINNING``, ``LOWERKIT_PANEL_RULES``,
``LOWERKIT_PLANE_MEANS``, ``LOWERKIT_WINOGRAD_PANELS``, ...: a switch read when a call binds
follows its handle too), then called alternately, in pairs whose order flips each time. Prints each handle's best and median call and the median of the
per-pair ratios (second value / first): on a shared machine whose speed drifts, the pairs see
the same drift, so their ratio is the figure to read.

    python benchmarks/paired.py LOWERKIT_CHANNEL_DIRECT 0 1 --models resnet18 resnet50 --batch 1 --pairs 60
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import lowerkit as lk
from lowerkit import models
from peers import blas_lines


@contextmanager
def setting(variable: str, value: str) -> Iterator[None]:
    """``variable`` set to ``value`` inside the block, as it was after."""
    before = os.environ.get(variable)
    os.environ[variable] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before


def lowered(module: lk.Module, backends: list[str], variable: str, value: str):
    """``module`` lowered to ``backends`` with ``variable`` set to ``value`` while it compiles,
    as a call that sets it again around each call."""
    with setting(variable, value), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        handle = lk.to_backend(module, backends)

    def call(x: np.ndarray):
        with setting(variable, value):
            return handle(x)

    return call


def compare(name: str, batch: int, backends: list[str], variable: str, values: tuple[str, str], pairs: int) -> None:
    x = models.example_input(name, batch=batch)
    module = lk.trace(models.get(name), x)
    handles = [lowered(module, backends, variable, v) for v in values]
    outs = [np.asarray(h(x)) for h in handles]
    scale = float(np.abs(outs[0]).max())
    for h in handles:
        for _ in range(5):
            h(x)
    times: list[list[float]] = [[], []]
    for p in range(pairs):
        for i in ((0, 1) if p % 2 else (1, 0)):
            start = time.perf_counter()
            handles[i](x)
            times[i].append(time.perf_counter() - start)
    ratios = [b / a for a, b in zip(*times)]
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    cells = [f"{variable}={v}: best {min(t) * 1e3:.2f} median {statistics.median(t) * 1e3:.2f} ms"
             for v, t in zip(values, times)]
    print(f"{name} batch {batch}: {' | '.join(cells)} | {values[1]} / {values[0]}: median of {pairs} pairs "
          f"{median:.3f} (quartiles {q1:.3f}-{q3:.3f}), best {min(times[1]) / min(times[0]):.3f}; "
          f"outputs differ by {float(np.abs(outs[1] - outs[0]).max()) / scale:.1e} of the largest", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variable")
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--backends", nargs="+", default=["glow_like"])
    parser.add_argument("--pairs", type=int, default=60)
    args = parser.parse_args()
    for line in blas_lines():
        print(line)
    for batch in args.batch:
        for name in args.models:
            compare(name, batch, args.backends, args.variable, (args.first, args.second), args.pairs)


if __name__ == "__main__":
    main()
