"""Winograd's 36 channel GEMMs ``m[a] = U[a] @ V[a]`` (F(4x4, 3x3)) on BLAS's sgemm against the
panel GEMM over ``U`` packed once (``lowerkit.backend.cpu.panels.PackedTuples``), one thread:
what ``panels.tuples_fit`` decides from.

    python benchmarks/winograd_tuples.py                       # the ResNets' bands and slices
    python benchmarks/winograd_tuples.py --shapes 128x256x16,256x256x64

Each shape is ``rows x inputs x tiles``: one band of output channels (a team thread's half of
a layer at batch 1, or a batch slice's whole layer), the input channels, and the output tiles
of the chunk of images. Two cache states, interleaved per round: ``hot`` (the call right
after the same call) and ``cold`` (every cache line of a 96 MB buffer touched first, then
``V`` and the products read back: inside a model ``U`` comes from memory while ``V`` was just
written). Prints the median and best ms of each engine and the median ratio panel / sgemm;
never asserts a timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from lowerkit.backend.cpu import panels
from peers import blas_lines

# ResNet-18/50 on 2 threads: a team thread's band at batch 1 (56x56, 28x28, 14x14 maps), and a
# batch slice of four images (the same maps, 512x7x7 too).
SHAPES = [(32, 64, 196), (64, 128, 49), (128, 256, 16),
          (64, 64, 784), (128, 128, 196), (256, 256, 64), (512, 512, 16)]


def measure(rows: int, inputs: int, tiles: int, rounds: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(0)
    u = rng.standard_normal((36, rows, inputs)).astype(np.float32)
    v = rng.standard_normal((36, inputs, tiles)).astype(np.float32)
    products = [np.empty((36, rows, tiles), np.float32) for _ in range(2)]
    packed = panels.PackedTuples.of(u)
    engines = {"sgemm": lambda: np.matmul(u, v, out=products[0]),
               "panel": lambda: packed.run(v, products[1], tiles)}
    for engine in engines.values():
        engine()
    np.testing.assert_allclose(products[1], products[0], rtol=1e-4, atol=1e-3 * np.sqrt(inputs))
    flush = np.ones(96 * 2**20 // 4, np.float32)
    times: dict[str, list[float]] = {f"{name} {state}": [] for name in engines for state in ("hot", "cold")}
    for _ in range(rounds):
        for name, engine in engines.items():
            engine()
            start = time.perf_counter()
            engine()
            times[f"{name} hot"].append(time.perf_counter() - start)
            flush[::16] += 1.0
            v.sum()
            products[0].sum()
            products[1].sum()
            start = time.perf_counter()
            engine()
            times[f"{name} cold"].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="ROWSxINPUTSxTILES,... (default: the ResNets' shapes above)")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for line in blas_lines():
        print(line)
    print(f"panels.tuples_fit rule: at least {panels.TUPLES_MIN_INPUTS} inputs, at most "
          f"{panels.TUPLES_MAX_COLUMNS} tiles, the wide tile (here: {panels.wide_tile()})")
    print(f"{'rows x inputs x tiles':>22}  {'state':>5}  {'sgemm ms':>15}  {'panel ms':>15}  panel / sgemm  fits")
    with threadpool_limits(1):
        for rows, inputs, tiles in shapes:
            times = measure(rows, inputs, tiles, args.rounds)
            for state in ("hot", "cold"):
                a, b = times[f"sgemm {state}"], times[f"panel {state}"]
                ratio = statistics.median(y / x for x, y in zip(a, b))
                cells = [f"{statistics.median(t) * 1e3:6.3f} / {min(t) * 1e3:6.3f}" for t in (a, b)]
                print(f"{f'{rows}x{inputs}x{tiles}':>22}  {state:>5}  {cells[0]:>15}  {cells[1]:>15}  "
                      f"{ratio:13.2f}  {panels.tuples_fit(inputs, tiles)}")


if __name__ == "__main__":
    main()
